"""The product routes (conversations, files, memory) as one router, so the
app includes them with one line. It goes before chat_api's: `/v1/conversations/search` must not be
taken for the conversation id "search"."""

from __future__ import annotations

from fastapi import APIRouter

from switchyard.services.gateway import conversations_api, files_api, knowledge_api

router = APIRouter()
router.include_router(conversations_api.router)
router.include_router(files_api.router)
router.include_router(knowledge_api.router)
