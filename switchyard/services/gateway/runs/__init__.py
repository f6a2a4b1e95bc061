"""A run's life in one place: start, relay as SSE, resume after a disconnect, rerun, admission."""
