"""Waiting on a run from a handler that has not started its response yet (non-streaming answers, and
streaming ones that hold the status line until the first event so an early error gets its real status)."""

from __future__ import annotations

from fastapi import Request

from schemas import ChatEvent
from services.gateway.core import Gateway
from services.gateway.errors import ApiError
from services.gateway.streams import Run

# Nothing is being sent, so the server cannot notice a client that left; we look every so often.
POLL_S = 0.25


async def wait_events(gw: Gateway, run: Run, request: Request, *, first_only: bool = False) -> list[ChatEvent]:
    """The run's events up to the terminal one (or just the first); raises CancelledError if the client left."""
    gw.streams.attach(run)
    completed = False
    got: list[ChatEvent] = []
    try:
        async for item in run.follow(-1, POLL_S):
            if item is None:
                if await request.is_disconnected():
                    break
                continue
            got.append(item[1])
            if first_only:
                break
        else:
            completed = True
        if first_only and got:
            completed = True
    finally:
        gw.streams.detach(run, completed)
    return got


def terminal_error(events: list[ChatEvent]) -> ApiError | None:
    if events and events[-1].type == "error" and events[-1].error is not None:
        info = events[-1].error
        return ApiError(info.code, info.message)
    return None
