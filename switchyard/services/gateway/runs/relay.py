"""The one relay from runs to clients.

Streaming: `follow` reads one run (or several, OpenAI's `n`) as a reader (attached while it reads, so a
client that leaves cancels what nobody reads any more); an `Encoder` turns each `ChatEvent` into the
protocol's SSE events (/chat, OpenAI, Anthropic: pure, no I/O); `sse_response` sends them with
sse-starlette, which also sends the protocol's keep-alive and notices the client leaving. Each event
goes out as soon as it is here, and every event already here goes out in one write: a reader that fell
behind (a busy gateway, a fast engine) pays for one socket write per catch-up, not one per token.

Not streaming (and the first event of a stream, held so that an early error gets its real status):
`collect` reads the events while waiting on the client's disconnect message.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec
from fastapi import Request
from fastapi.responses import JSONResponse, Response
from sse_starlette import EventSourceResponse, ServerSentEvent

from switchyard.schemas import ChatEvent, ErrorCode
from switchyard.services.gateway.core import Gateway
from switchyard.services.gateway.errors import ApiError, error_response
from switchyard.services.gateway.runs.run import TERMINAL, Run

SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}
# (answer index, sequence number, event): what an encoder is given.
Item = tuple[int, int, ChatEvent]
# The items that were ready together, in order: what one socket write carries.
Batch = list[Item]


_json = msgspec.json.Encoder().encode
_json_decode = msgspec.json.Decoder().decode


class Frame(ServerSentEvent):
    """An event whose data is one line (compact JSON never holds a raw line break): its bytes are what
    `ServerSentEvent.encode` makes of it, joined directly instead of through its per-line split and buffer."""

    def __init__(self, data: str, event: str | None = None, id: str | None = None) -> None:
        super().__init__(data, event=event, id=id, sep="\n")

    def encode(self) -> bytes:
        head = "" if self.id is None else f"id: {self.id}\n"
        if self.event is not None:
            head += f"event: {self.event}\n"
        return f"{head}data: {self.data}\n\n".encode()


def sse(data: Any, event: str | None = None, id: int | None = None) -> ServerSentEvent:
    """One event; `data` is compact JSON (UTF-8 as it is, keys in order) unless it is already a string
    (OpenAI's `[DONE]`). One encode per frame, by msgspec: a delta's whole cost here is a few µs."""
    payload = data if isinstance(data, str) else _json(data).decode()
    if "\n" in payload or "\r" in payload:  # only a string given as it is can hold one: one data line each
        return ServerSentEvent(payload, event=event, id=None if id is None else str(id), sep="\n")
    return Frame(payload, event=event, id=None if id is None else str(id))


# Stands for a delta's text in a chunk's template: a string no model writes.
TEXT_SLOT = "\x00switchyard-text\x00"


def json_template(data: Any, slot: str = TEXT_SLOT) -> tuple[str, str]:
    """The JSON of `data` around the one string value equal to `slot`, as (before, after): a frame that
    differs from another only in that string is `before + json(text) + after`, the same bytes as encoding
    it whole, without building and walking its dict per token."""
    before, after = _json(data).decode().split(_json(slot).decode())
    return before, after


def json_str(text: str) -> str:
    return _json(text).decode()


class Encoder:
    """A protocol's framing of a run: what opens the stream, each event's SSE events, what closes it, and
    what keeps a quiet line alive (by default nothing, nothing, and a comment)."""

    def opening(self) -> list[ServerSentEvent]:
        return []

    def encode(self, index: int, seq: int, event: ChatEvent) -> list[ServerSentEvent]:
        raise NotImplementedError

    def closing(self) -> list[ServerSentEvent]:
        return []

    def keepalive(self) -> ServerSentEvent:
        return ServerSentEvent(comment="keepalive", sep="\n")


async def _read(gw: Gateway, run: Run, after: int) -> AsyncIterator[list[tuple[int, ChatEvent]]]:
    gw.runs.attach(run)
    completed = False
    try:
        async for batch in run.follow_batches(after):
            yield batch
        completed = True
    finally:
        gw.runs.detach(run, completed)


async def follow(gw: Gateway, runs: list[Run], after: int = -1) -> AsyncIterator[Batch]:
    """The runs' events as they come (each run's own in order), up to each one's last, in batches of
    what was ready together."""
    if len(runs) == 1:
        async for batch in _read(gw, runs[0], after):
            yield [(0, seq, event) for seq, event in batch]
        return
    queue: asyncio.Queue[Batch | None] = asyncio.Queue()

    async def pump(index: int, run: Run) -> None:
        try:
            async for batch in _read(gw, run, after):
                await queue.put([(index, seq, event) for seq, event in batch])
        finally:
            await queue.put(None)

    tasks = [asyncio.create_task(pump(i, r)) for i, r in enumerate(runs)]
    try:
        open_runs = len(tasks)
        while open_runs:
            got = [await queue.get()]
            while not queue.empty():
                got.append(queue.get_nowait())
            open_runs -= sum(b is None for b in got)
            merged = [item for b in got if b is not None for item in b]
            if merged:
                yield merged
    finally:
        for t in tasks:
            t.cancel()


def frames_of(encoder: Encoder, answers: list[list[ChatEvent]]) -> list[Any]:
    """The data of every frame the encoder would stream for these answers (each JSON payload decoded): what a
    protocol folds into its whole, non-streaming body, so that body is never a second derivation."""
    frames = [*encoder.opening()]
    for index, events in enumerate(answers):
        for seq, event in enumerate(events):
            frames += encoder.encode(index, seq, event)
    frames += encoder.closing()
    return [_decode(str(f.data)) for f in frames if f.data is not None]


def _decode(data: str) -> Any:
    try:
        return _json_decode(data)
    except msgspec.DecodeError:
        return data  # OpenAI's `[DONE]`


async def encoded(batches: AsyncIterator[Batch], encoder: Encoder) -> AsyncIterator[bytes]:
    """Each batch's SSE events as the bytes of one write (sse-starlette passes bytes through as they are)."""
    opening = encoder.opening()
    if opening:
        yield b"".join(e.encode() for e in opening)
    async for batch in batches:
        chunk = b"".join(e.encode() for index, seq, event in batch for e in encoder.encode(index, seq, event))
        if chunk:
            yield chunk
    closing = encoder.closing()
    if closing:
        yield b"".join(e.encode() for e in closing)


class SseResponse(EventSourceResponse):
    """sse-starlette's response, without the cancel scope it opens around every write to bound it by
    `send_timeout`: none is set here, so that scope never fires, and opening one costs about as much as
    encoding the token's frame."""

    async def _send_with_timeout(self, send: Any, message: Any) -> None:
        if self.send_timeout is not None:
            await super()._send_with_timeout(send, message)
            return
        try:
            await send(message)
        except BaseException:
            self._send_interrupted = True
            raise


def sse_response(gw: Gateway, batches: AsyncIterator[Batch], encoder: Encoder) -> EventSourceResponse:
    return SseResponse(
        encoded(batches, encoder),
        headers=SSE_HEADERS,
        ping=gw.settings.keepalive_s,
        ping_message_factory=encoder.keepalive,
        sep="\n",
    )


async def _client_gone(request: Request) -> None:
    """Returns when the client disconnects: the body is read, so the next message is the disconnect."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def collect(
    gw: Gateway, runs: list[Run], request: Request, *, first_only: bool = False, past_tools: bool = False
) -> list[list[ChatEvent]]:
    """Each run's events up to its last one (or only the first run's first: with `past_tools`, its first that is
    not a tool's); what came if the client left."""
    if first_only:
        runs = runs[:1]
    got: list[list[ChatEvent]] = [[] for _ in runs]

    async def read(i: int, run: Run) -> None:
        async for _, event in run.follow():
            got[i].append(event)
            if first_only and not (past_tools and event.type == "tool"):
                return

    for run in runs:
        gw.runs.attach(run)
    completed = False
    reading: asyncio.Future[Any] = asyncio.gather(*(read(i, r) for i, r in enumerate(runs)))
    gone: asyncio.Future[Any] = asyncio.ensure_future(_client_gone(request))
    try:
        await asyncio.wait([reading, gone], return_when=asyncio.FIRST_COMPLETED)
        completed = reading.done()
    finally:
        for task in (reading, gone):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reading
        for run in runs:
            gw.runs.detach(run, completed)
    return got


def terminal_error(events: list[ChatEvent]) -> ApiError | None:
    if events and events[-1].type == "error" and events[-1].error is not None:
        info = events[-1].error
        return ApiError(info.code, info.message)
    return None


def _kept_block(err: ApiError | None, runs: int, keep_blocked: bool) -> bool:
    """An answer output safety stopped, kept as its own choice: only among several answers."""
    return keep_blocked and runs > 1 and err is not None and err.code == ErrorCode.content_blocked


async def stream_response(
    gw: Gateway,
    runs: list[Run],
    request: Request,
    encoder: Encoder | Callable[[], Encoder],
    *,
    keep_blocked: bool = False,
) -> Response:
    """The stream, its status line held until the first event: a request the pipeline refuses (policy,
    deadline) then gets its real status, and the SDK raises its own exception type. `encoder` may be made
    only then (a callable), past the tool events: what the engine reported on starting (the prompt's tokens,
    its build) is known by the first text. `keep_blocked`: among several answers, one that output safety
    stopped is the encoder's to end, not the whole request's."""
    made = not isinstance(encoder, Encoder)
    (first,) = await collect(gw, runs, request, first_only=True, past_tools=made)
    err = terminal_error(first)
    if err is not None and not _kept_block(err, len(runs), keep_blocked):
        return error_response(err, request.url.path)
    return sse_response(gw, follow(gw, runs), encoder if isinstance(encoder, Encoder) else encoder())


async def whole_answers(
    gw: Gateway, runs: list[Run], request: Request, *, keep_blocked: bool = False
) -> list[list[ChatEvent]] | JSONResponse:
    """Every run's events to its end, or the error response for the first that did not end well. With
    `keep_blocked`, an answer output safety stopped is kept as one (its encoder ends it) while another ended
    well; when every answer was stopped, the request is."""
    answers = await collect(gw, runs, request)
    errors = []
    for events in answers:
        if not events or events[-1].type not in TERMINAL:
            return error_response(ApiError(ErrorCode.cancelled, "client went away"), request.url.path)
        errors.append(terminal_error(events))
    kept = [e is None or _kept_block(e, len(runs), keep_blocked) for e in errors]
    for err, ok in zip(errors, kept, strict=True):
        if err is not None and (not ok or all(e is not None for e in errors)):
            return error_response(err, request.url.path)
    return answers
