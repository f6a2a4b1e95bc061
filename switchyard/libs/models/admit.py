"""Whether a registry entry may be added at run time (`POST /v1/admin/models`): each refusal is a ValueError
whose message is the 400's, and nothing has been started or written when one is raised.

Two halves, because two processes check: `check_names` needs only the registry (the gateway runs it before it
asks for a pool, so a clash costs no bus round trip), `check_files` reads the filesystem (the stack supervisor
runs it, on the machine whose files the pool will open, together with `check_names` again against the registry
as it is when the pool is started: two requests racing for one name cannot both pass)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable

from switchyard.libs.models.registry import ModelRegistry
from switchyard.schemas.embeddings import EMBEDDING_MODEL_ALIASES
from switchyard.schemas.models import MODEL_NAME_PATTERN, ModelCard

# Engine kinds a pool can run (switchyard/libs/engine/factory.py create_engine).
ENGINES = ("native", "vllm", "tensorrt_llm", "sim")
# Engines that read a GGUF's weights themselves; the others serve a checkpoint directory (or, the simulated
# engine, nothing but the bundled tokenizer).
_GGUF_ENGINES = ("native",)
_NAME = re.compile(MODEL_NAME_PATTERN)
GGUF_MAGIC = b"GGUF"


def check_names(card: ModelCard, registry: ModelRegistry) -> None:
    """The entry's name, aliases, pool, engine and fallback make sense beside the registry's entries."""
    names = [card.name, *card.aliases]
    for name in names:
        if not _NAME.match(name):
            raise ValueError(
                f"model name or alias {name[:80]!r} is not allowed: use letters, digits, '.', '_' and '-' "
                "(up to 128, starting with a letter or digit)"
            )
    folded = [n.casefold() for n in names]
    if len(set(folded)) != len(folded):
        raise ValueError(f"model {card.name!r} names one name twice among its name and aliases")
    taken = {n.casefold() for n in EMBEDDING_MODEL_ALIASES}
    for other in registry.models:
        taken |= {n.casefold() for n in (other.name, *other.aliases)}
    clash = [n for n, f in zip(names, folded, strict=True) if f in taken]
    if clash:
        raise ValueError(f"model name or alias {clash[0]!r} is already served: GET /v1/admin/models lists them")
    if any(other.pool == card.pool for other in registry.models):
        raise ValueError(f"pool {card.pool!r} already serves a model: each model has a pool of its own")
    if card.engine not in ENGINES:
        raise ValueError(f"engine {card.engine[:40]!r} is not one of {', '.join(ENGINES)}")
    if card.assemble_package is not None:
        # It names a module to import: configured in the settings only, never over HTTP.
        raise ValueError("assemble_package is not accepted here: give `path`, a file or directory that exists")
    if card.fallback is not None and registry.find(card.fallback) is None:
        raise ValueError(f"fallback {card.fallback[:80]!r} is not a served model")
    if card.path is None:
        raise ValueError("path is required: a GGUF file or a Hugging Face checkpoint directory (with config.json)")


def gguf_architecture(path: str) -> str:
    """`general.architecture` of a GGUF file (its metadata only; the tensors stay unread)."""
    from gguf import GGUFReader

    try:
        field = GGUFReader(path, "r").fields.get("general.architecture")
    except Exception as e:  # a truncated or corrupt file: the reader raises what numpy raises
        raise ValueError(f"path {path!r} is not a readable GGUF file: {str(e)[:200]}") from e
    if field is None:
        raise ValueError(f"GGUF file {path!r} names no general.architecture")
    return str(field.contents())


def native_architectures() -> Iterable[str]:
    """What the native engine serves, from the engine itself (imported here, not at module load: it brings
    torch)."""
    from switchyard.libs.engine.weights import ARCHITECTURES

    return ARCHITECTURES


def check_files(card: ModelCard, served: Iterable[str] | None = None) -> None:
    """The entry's `path` is a GGUF file whose architecture its engine serves (`served`: the native engine's
    list when None), or a directory with config.json."""
    path = card.path
    if path is None:
        raise ValueError("path is required: a GGUF file or a Hugging Face checkpoint directory (with config.json)")
    if not os.path.isabs(path):
        raise ValueError(f"path {path[:200]!r} must be absolute (the pool's process has its own working directory)")
    if os.path.isdir(path):
        config = os.path.join(path, "config.json")
        if not os.path.isfile(config):
            raise ValueError(f"directory {path!r} has no config.json: it is not a Hugging Face checkpoint")
        try:
            with open(config, encoding="utf-8") as f:
                json.load(f)
        except (OSError, ValueError) as e:
            raise ValueError(f"{config!r} is not readable JSON: {str(e)[:200]}") from e
        return
    if not os.path.isfile(path):
        raise ValueError(f"path {path!r} does not exist (or is neither a file nor a directory)")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise ValueError(f"file {path!r} is not a GGUF file (and not a checkpoint directory)")
    arch = gguf_architecture(path)
    if card.engine in _GGUF_ENGINES:
        allowed = tuple(native_architectures() if served is None else served)
        if arch not in allowed:
            raise ValueError(
                f"GGUF architecture {arch!r} is not served by the {card.engine} engine (it serves: {', '.join(allowed)})"
            )


def check_card(card: ModelCard, registry: ModelRegistry, served: Iterable[str] | None = None) -> None:
    """Both halves: what the supervisor runs before it starts a pool."""
    check_names(card, registry)
    check_files(card, served)
