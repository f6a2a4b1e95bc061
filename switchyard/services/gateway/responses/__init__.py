"""OpenAI Responses: `POST /v1/responses` and the stored responses (request, encoder, router)."""
