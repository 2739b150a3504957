"""ChatBridge benchmarks (see bench/README.md). Importable as a Django app for the loop plugin."""
