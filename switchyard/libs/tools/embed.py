"""Shared, lazily loaded sentence embedder (switchyard.libs.embeddings), optional everywhere in this package.

Loading the model takes seconds, longer than a tool's time limit, so search never waits for it:
`get(block=False)` starts the load in the background and returns None until it is ready, and
callers fall back to keyword search meanwhile. Services call `warmup()` at startup.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

log = logging.getLogger(__name__)

_lock = threading.Lock()
_state: dict[str, Any] = {"embedder": None, "failed": False, "loading": None}


def _load() -> None:
    try:
        from switchyard.libs.embeddings import get_embedder

        emb = get_embedder()
        emb.embed(["warm up"])
        _state["embedder"] = emb
    except Exception:
        log.warning("sentence embeddings unavailable; falling back to keyword search", exc_info=True)
        _state["failed"] = True


def get(*, block: bool) -> Any | None:
    """The embedder (with `.embed(list[str]) -> (n, 384) unit vectors`), or None if not (yet) available."""
    if _state["embedder"] is not None or _state["failed"]:
        return _state["embedder"]
    with _lock:
        thread: threading.Thread | None = _state["loading"]
        if thread is None:
            thread = threading.Thread(target=_load, name="embedder-load", daemon=True)
            _state["loading"] = thread
            thread.start()
    if block:
        thread.join()
    return _state["embedder"]


def warmup() -> bool:
    return get(block=True) is not None
