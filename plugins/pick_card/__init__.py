"""The pick_card plugin: a create_tool handoff demo — deal cards, the user picks one."""
