"""The product routes (conversations, files, memory) as one router, so the
app includes them with one line. It goes before simple_chat's: `/v1/conversations/search` must not be
taken for the conversation id "search"."""

from __future__ import annotations

from fastapi import APIRouter

from switchyard.services.gateway.product import conversations as conversations_api
from switchyard.services.gateway.product import files_api
from switchyard.services.gateway.product import knowledge as knowledge_api

router = APIRouter()
router.include_router(conversations_api.router)
router.include_router(files_api.router)
router.include_router(knowledge_api.router)
