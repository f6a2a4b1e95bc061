"""Switchyard: a chat-assistant serving pipeline (eight services over NATS, a paged-KV engine, SSE out)."""

from pathlib import Path

# The folder that holds this package (a checkout's root): what a child process run by another interpreter
# needs on its path, and where the demo data under infra/ is found.
CHECKOUT = Path(__file__).resolve().parent.parent
