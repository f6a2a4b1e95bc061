"""The gateway: HTTP in (SSE, OpenAI- and Anthropic-compatible APIs), API keys and limits, work out on the bus."""
