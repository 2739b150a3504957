"""The tool author's API: tools and their keys, answers and their rules, plugins and their
forms, sampling, and the errors that say what to fix. No web imports."""
