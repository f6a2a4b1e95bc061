"""OpenAI's `system_fingerprint` for this replica: the engine, its version, and the model file it serves.
Two answers with the same fingerprint came from the same build of the same weights."""

from __future__ import annotations

import hashlib
import os
from importlib import metadata

# The distribution whose version is the engine's: ours for the engines in this package.
DISTRIBUTIONS = {"vllm": "vllm", "tensorrt_llm": "tensorrt_llm"}


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "unknown"


def _files(path: str) -> list[str]:
    """The model's files: a GGUF, or a checkpoint directory's config and weights."""
    if not os.path.isdir(path):
        return [path]
    names = sorted(n for n in os.listdir(path) if n == "config.json" or n.endswith((".safetensors", ".gguf")))
    return [os.path.join(path, n) for n in names]


def model_digest(path: str) -> str:
    """The files' names, sizes and modification times, not their bytes: reading gigabytes of weights at start
    for an identifier is not worth it, and replacing a file changes its size or time."""
    h = hashlib.blake2b(digest_size=6)
    for file in _files(path):
        try:
            st = os.stat(file)
        except OSError:
            continue
        h.update(f"{os.path.basename(file)}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()


def system_fingerprint(engine: str, model_path: str) -> str:
    """`<engine>-<version>-<model digest>`, e.g. `native-0.1.0-3f9a0c1b2d4e`."""
    return f"{engine}-{_version(DISTRIBUTIONS.get(engine, 'switchyard'))}-{model_digest(model_path)}"
