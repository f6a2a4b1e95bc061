"""Switchyard: a chat-assistant serving pipeline (eight services over NATS, a paged-KV engine, SSE out)."""
