"""The `switchyard` command: run the whole stack, manage keys, replay and export."""
