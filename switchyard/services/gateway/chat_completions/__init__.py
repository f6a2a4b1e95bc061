"""OpenAI Chat Completions: `POST /v1/chat/completions` (request models, chunk encoder, router)."""
