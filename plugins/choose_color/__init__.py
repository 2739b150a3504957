"""The choose_color plugin: a question delegated to a sandboxed guest UI (seed 004)."""
