"""Asking a stage (the context service, mostly) on behalf of an HTTP route: one place names what was
not found, never what the store said."""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel

from switchyard.libs.bus import BusError
from switchyard.schemas import ErrorCode
from switchyard.services.gateway.core import Gateway
from switchyard.services.gateway.errors import ApiError

R = TypeVar("R", bound=BaseModel)


async def ask(gw: Gateway, subject: str, msg: BaseModel, reply_type: type[R], *, tenant: str, missing: str) -> R:
    """Request/reply with context; `not_found` becomes a 404 naming `missing` (never what the store said,
    which could differ between "absent" and "another tenant's")."""
    try:
        return await gw.bus.request(subject, msg, reply_type, tenant=tenant)
    except BusError as e:
        if e.code == ErrorCode.not_found:
            raise ApiError(ErrorCode.not_found, f"{missing} not found") from e
        raise
