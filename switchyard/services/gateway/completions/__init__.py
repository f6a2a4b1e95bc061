"""OpenAI legacy text completions: `POST /v1/completions`."""
