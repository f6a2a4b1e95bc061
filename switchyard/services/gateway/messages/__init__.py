"""Anthropic Messages: `POST /v1/messages` (request models, tools, encoder, router)."""
