"""OpenAI embeddings: `POST /v1/embeddings`."""
