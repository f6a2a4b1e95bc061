"""Re-running a logged request (`POST /v1/admin/replay/{rid}`).

`inference`: the logged final prompt and sampling (seed included) go straight to `pipeline.route`, so the
router picks a replica, tools passes the prompt through, and a greedy or seeded request must reproduce
its output token for token. `pipeline`: the original message runs through every stage again against a
snapshot of the conversation as it was (its earlier turns as client messages, no chat id), so nothing in
the original conversation changes. Either way the replay is a request of its own, launched as an ordinary
run: a new rid with `persist=False`, its own trace, and a gateway record carrying `replay_of`.
"""

from __future__ import annotations

import asyncio
import difflib
import re
import time
import uuid
from typing import Any

from pydantic import ValidationError

from switchyard.libs.bus import BusError
from switchyard.libs.bus import headers as H
from switchyard.libs.plan import PlanError, plan_work
from switchyard.libs.store.keys import ApiKey
from switchyard.schemas import (
    ChatMessage,
    ConversationQuery,
    ConversationReply,
    DiffSegment,
    ErrorCode,
    RecordedRequest,
    ReplayRequest,
    ReplayResult,
    RequestQuery,
    RequestRecord,
    RequestRecordReply,
    Sampling,
    Work,
    subjects,
)
from switchyard.schemas.records import Text
from switchyard.services.gateway.core import Gateway
from switchyard.services.gateway.errors import ApiError
from switchyard.services.gateway.runs.run import Rerun

ROUTE = "POST /v1/admin/replay/{rid}"
HISTORY_STATUSES = ("complete", "stopped")
_WORDS = re.compile(r"\S+\s*|\s+")


async def _record(gw: Gateway, rid: str) -> RequestRecord:
    reply = await gw.bus.request(subjects.ADMIN_REQUEST_GET, RequestQuery(rid=rid), RequestRecordReply)
    return RequestRecord.model_validate(reply.record)


def _str(value: Text | None) -> str:
    """Text the record still holds; "" where it holds none, or only a digest of it."""
    return value if isinstance(value, str) else ""


def _sampling(record: RequestRecord, req: ReplayRequest) -> Sampling:
    # Inference logs the sampling it ran with (after the router's changes); the gateway logs what was asked.
    logged = record.sampling or (record.request.sampling if record.request else None)
    base = logged.model_dump() if logged is not None else {}
    o = req.overrides
    values = {**base, **{k: v for k, v in o.model_dump().items() if k not in ("model", "mode") and v is not None}}
    try:
        return Sampling.model_validate(values)
    except ValidationError as e:
        raise ApiError(ErrorCode.bad_request, f"invalid sampling overrides: {e.errors()[0]['msg']}") from e


async def _history(gw: Gateway, record: RequestRecord, request: RecordedRequest) -> list[ChatMessage]:
    """The conversation as the original request saw it: the turns before its own."""
    chat_id = request.chat_id
    if not chat_id:
        return [ChatMessage.model_validate(m) for m in request.messages]
    try:
        conv = await gw.bus.request(
            subjects.CONVERSATION_GET,
            ConversationQuery(tenant=record.tenant, chat_id=chat_id),
            ConversationReply,
            tenant=record.tenant,
        )
    except BusError as e:
        if e.code != ErrorCode.not_found:
            raise
        return []  # the conversation was deleted since: replay the message on its own
    turns = conv.turns
    idx = next((i for i, t in enumerate(turns) if t.rid == record.rid), None)
    # Without its own turn: the turns from before the request began (its first stage's start).
    began = min((s.started_ms for s in record.stages.values()), default=0)
    before = turns[:idx] if idx is not None else [t for t in turns if t.created_ms < began]
    out: list[ChatMessage] = []
    for t in before:
        if t.status in HISTORY_STATUSES:
            out += [ChatMessage(role="user", content=t.user_text), ChatMessage(role="assistant", content=t.answer)]
    return out


async def _work(gw: Gateway, key: ApiKey, rid: str, record: RequestRecord, req: ReplayRequest) -> tuple[Work, str]:
    work, subject = await _unplanned(gw, key, rid, record, req)
    try:
        return work.model_copy(update={"plan": plan_work(work, gw.settings.registry)}), subject
    except PlanError as e:
        raise ApiError(ErrorCode.bad_request, str(e)) from e


async def _unplanned(gw: Gateway, key: ApiKey, rid: str, record: RequestRecord, req: ReplayRequest) -> tuple[Work, str]:
    request = record.request
    if request is None or not request.model_fields_set:
        raise ApiError(ErrorCode.bad_request, f"request {rid} has no logged request yet (still running?)")
    route = record.route
    o = req.overrides
    common: dict[str, Any] = {
        "rid": uuid.uuid4().hex,
        "tenant": record.tenant or key.tenant,
        "user": request.user or key.user,
        "key_id": key.id,
        "api": "replay",
        "chat_id": None,
        "text": _str(request.text),
        "system": request.system if isinstance(request.system, str) else None,
        "sampling": _sampling(record, req),
        "created_ms": H.now_ms(),
        "persist": False,
        "replay_of": rid,
        "replay_mode": req.mode,
    }
    if o.model is not None and gw.settings.registry.find(o.model) is None:
        raise ApiError(ErrorCode.not_found, f"model {o.model!r} does not exist; GET /v1/models lists them")
    # A text completion replays as one: its text is the whole prompt, never templated.
    common["prompt_mode"] = "raw" if getattr(request, "prompt_mode", "chat") == "raw" else "chat"
    if req.mode == "inference":
        if record.safety_action == "block" and "inference" not in record.stages:
            # An inference replay skips input safety: it must not hand the model a prompt that was never allowed.
            raise ApiError(
                ErrorCode.bad_request, f"request {rid} was blocked by input safety; replay it in pipeline mode"
            )
        prompt = _str(record.prompt)
        if not prompt:
            raise ApiError(ErrorCode.bad_request, f"request {rid} has no logged prompt to replay")
        # The prompt's length as inference counted it, else as the context stage rendered it.
        tokens = (record.usage.prompt_tokens if record.usage else 0) or record.prompt_tokens
        work = Work(
            **common,
            model=o.model or record.model or (route.model if route else None) or request.model,
            mode=o.mode or record.mode or (route.mode if route else None) or request.mode,
            prompt=prompt,
            prompt_tokens=tokens if isinstance(tokens, int) else 0,
        )
        return work, subjects.ROUTE
    work = Work(
        **common,
        messages=await _history(gw, record, request),
        model=o.model or request.model,
        mode=o.mode or request.mode,
    )
    return work, subjects.CONTEXT


def word_diff(a: str, b: str) -> tuple[str, list[DiffSegment]]:
    """A unified diff with one word per line, and the same comparison as segments for side-by-side views."""
    wa, wb = _WORDS.findall(a), _WORDS.findall(b)
    unified = "\n".join(
        difflib.unified_diff([w.rstrip() for w in wa], [w.rstrip() for w in wb], "original", "replay", lineterm="")
    )
    segs = [
        DiffSegment(op=op, a="".join(wa[i1:i2]), b="".join(wb[j1:j2]))  # type: ignore[arg-type]
        for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, wa, wb, autojunk=False).get_opcodes()
    ]
    return unified, segs


async def _rerun_record(gw: Gateway, rid: str, timeout_s: float) -> RequestRecord:
    """The replay's own record once inference has logged its raw output (the logger writes a moment later)."""
    deadline = time.monotonic() + timeout_s
    last = RequestRecord()
    while time.monotonic() < deadline:
        try:
            reply = await gw.bus.request(subjects.ADMIN_REQUEST_GET, RequestQuery(rid=rid), RequestRecordReply)
            last = RequestRecord.model_validate(reply.record)
            if last.raw_output is not None or last.status == "error":
                return last
        except BusError:
            pass
        await asyncio.sleep(0.2)
    return last


async def rerun(gw: Gateway, key: ApiKey, rid: str, req: ReplayRequest) -> ReplayResult:
    original = await _record(gw, rid)
    work, subject = await _work(gw, key, rid, original, req)
    t0 = time.perf_counter()
    overrides = req.overrides.model_dump(exclude_none=True)
    # An ordinary run: admitted, traced, ended and recorded as every request is; `rerun` marks its record.
    rerun = Rerun(of=rid, mode=req.mode, overrides=overrides, by=key.id)
    run = gw.runs.begin(work.rid, "replay", ROUTE, work.tenant, key.id, None, rerun)
    async with gw.runs.starting(run):
        await gw.runs.launch(run, work, subject)
    events = [event async for _, event in run.follow()]
    final, error, status = run.last, run.error, run.client_status
    released = "".join(e.text for e in events if e.type == "delta")
    new = await _rerun_record(gw, work.rid, 10.0)
    # Token for token: the raw model output (before output redaction) of each; thinking too when present.
    a = _str(original.raw_output) or _str(original.output)
    b = _str(new.raw_output) if new.raw_output is not None else released
    thinking = new.thinking if new.thinking is not None else original.thinking
    matched = a == b and _str(original.thinking) == _str(thinking)
    diff, segs = ("", []) if matched else word_diff(a, b)
    return ReplayResult(
        rid=work.rid,
        replay_of=rid,
        mode=req.mode,
        overrides=overrides,
        status=status,
        finish_reason=final.finish_reason if final is not None else None,
        error=error.model_dump(mode="json") if error is not None else None,
        output=b,
        original_output=a,
        matched=matched and status != "error",
        diff=diff,
        segments=segs,
        usage=final.usage.model_dump() if final is not None and final.usage else {},
        # As logged: the counts it reported, no defaults filled in.
        original_usage=original.usage.model_dump(exclude_unset=True) if original.usage else {},
        duration_ms=(time.perf_counter() - t0) * 1000,
    )
