"""Creating a response, shared by `POST /v1/responses` and WebSocket mode: the request read and checked, the
chain it continues found, the run started, and the response as created (its template).

A stored response (`store`, the default) is a turn of one of the tenant's conversations: the first response
of a chain opens a conversation whose chat id is that response's id, and a request with
`previous_response_id` continues the same conversation, so the pipeline's own history (trimmed to the
prompt budget like any chat) is the chain's context. A response id names both: `resp_<rid>` for a chain's
first response, `resp_<first rid>_<rid>` after it.
"""

from __future__ import annotations

import re
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import HTTPConnection

from switchyard.libs.store.keys import ApiKey
from switchyard.schemas import (
    ChatEvent,
    ChatMessage,
    ConversationQuery,
    ConversationReply,
    ErrorCode,
    ErrorInfo,
    Turn,
    subjects,
)
from switchyard.services.gateway.ask import ask
from switchyard.services.gateway.core import Gateway, check_text, effort_ask, resolve_model, sampling, start_run
from switchyard.services.gateway.errors import ApiError
from switchyard.services.gateway.params import refuse_unsupported
from switchyard.services.gateway.response_format import response_format_of
from switchyard.services.gateway.responses.compaction import history_of
from switchyard.services.gateway.responses.encoder import ResponseEncoder
from switchyard.services.gateway.responses.request import (
    RESPONSE_ID_PATTERN,
    FunctionChoice,
    ResponsesRequest,
    read_input,
    refuse_capabilities,
)
from switchyard.services.gateway.runs.run import Run
from switchyard.services.gateway.settings import GatewaySettings
from switchyard.services.gateway.tool_calls import check_tool_grammars, choice_of, specs

# Responses this gateway started, by rid: what was asked (echoed in the response) and the function names,
# for reading one back while it runs (background) and a while after.
KEPT = 1024
STATUS_OF_TURN = {"complete": "stop", "stopped": "cancelled"}


class PreviousResponseNotFound(ApiError):
    """`previous_response_id` names no response this key can continue: the Open Responses code is its own
    (WebSocket mode's error envelope carries it); over HTTP it is the usual 404 (400 for an id that is not
    one of ours at all)."""

    OPEN_CODE = "previous_response_not_found"

    def __init__(self, previous: str, *, malformed: bool = False):
        if malformed:
            super().__init__(ErrorCode.bad_request, f"previous_response_id {previous[:80]!r} is not a response id")
        else:
            super().__init__(ErrorCode.not_found, f"previous response {previous!r} not found")


def chain_ids(response_id: str) -> tuple[str, str]:
    """(the conversation's chat id, the rid of the request that made the response)."""
    parts = response_id.removeprefix("resp_").split("_")
    return f"resp_{parts[0]}", parts[-1]


@dataclass
class Kept:
    by_rid: OrderedDict[str, tuple[dict[str, Any], set[str]]] = field(default_factory=OrderedDict)
    # Responses deleted while they ran: whatever the pipeline still saves for them is never shown.
    deleted: OrderedDict[str, None] = field(default_factory=OrderedDict)

    def put(self, rid: str, template: dict[str, Any], tool_names: set[str]) -> None:
        self.by_rid[rid] = (template, tool_names)
        while len(self.by_rid) > KEPT:
            self.by_rid.popitem(last=False)

    def delete(self, response_id: str) -> None:
        self.deleted[response_id] = None
        while len(self.deleted) > KEPT:
            self.deleted.popitem(last=False)


def kept(conn: HTTPConnection) -> Kept:
    state = conn.app.state
    if not hasattr(state, "responses_kept"):
        state.responses_kept = Kept()
    k: Kept = state.responses_kept
    return k


def local_run(gw: Gateway, conn: HTTPConnection, response_id: str, tenant: str) -> tuple[Run, ResponseEncoder] | None:
    """The run of a response still in progress on this gateway (another tenant's is absent), with a fresh
    encoder. A finished one is read from the store, where its turn was saved before its last event."""
    _, rid = chain_ids(response_id)
    run = gw.runs.by_rid.get(rid)
    entry = kept(conn).by_rid.get(rid)
    if run is None or entry is None or run.tenant != tenant or entry[0]["id"] != response_id or not run.live:
        return None
    return run, ResponseEncoder(entry[0], entry[1])


def base_template(response_id: str, created_at: int, model: str) -> dict[str, Any]:
    """A response with every field the specification requires, each at its default, no output yet."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "completed_at": None,
        "status": "in_progress",
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "max_output_tokens": None,
        "max_tool_calls": None,
        "metadata": {},
        "model": model,
        "output": [],
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "prompt_cache_key": None,
        "reasoning": {"effort": None, "summary": None},
        "safety_identifier": None,
        "service_tier": "default",
        "store": True,
        "temperature": 1.0,
        "top_p": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "top_logprobs": 0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "truncation": "disabled",
        "usage": None,
    }


def template_of(response_id: str, body: ResponsesRequest, asked: Any, tool_choice: Any) -> dict[str, Any]:
    """The response as created: every parameter the client gave (or its default) echoed."""
    fmt = body.text.format if body.text is not None and body.text.format is not None else None
    template = base_template(response_id, int(time.time()), body.model)
    template.update(
        background=body.background,
        instructions=body.instructions,
        max_output_tokens=body.max_output_tokens,
        max_tool_calls=body.max_tool_calls,
        metadata=body.metadata or {},
        parallel_tool_calls=body.parallel_tool_calls is not False,
        previous_response_id=body.previous_response_id,
        prompt_cache_key=body.prompt_cache_key,
        reasoning={"effort": body.reasoning.effort if body.reasoning else None, "summary": None},
        safety_identifier=body.safety_identifier,
        store=body.store,
        temperature=asked.temperature,
        top_p=asked.top_p,
        presence_penalty=asked.presence_penalty,
        frequency_penalty=asked.frequency_penalty,
        text={"format": fmt.model_dump(by_alias=True, exclude_none=True) if fmt else {"type": "text"}},
        tool_choice=tool_choice,
        # Each function tool as given: a null description and `strict` stay (the specification requires both).
        tools=[
            {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
                "strict": t.strict,
            }
            for t in body.function_tools()
        ],
        truncation=body.truncation or "disabled",
    )
    return template


def stored_template(response_id: str, turn: Turn, settings: GatewaySettings) -> dict[str, Any]:
    """A stored response read back: what the request asked is in its logged record, not the conversation, so
    its parameters read back at this gateway's defaults."""
    created = turn.created_ms // 1000
    template = base_template(response_id, created, turn.model or settings.models[0])
    # Every function call the stored answer made.
    template.update(parallel_tool_calls=True, temperature=settings.default_temperature)
    if turn.status == "complete" and (turn.finish_reason or "stop") == "stop":
        # The turn keeps when it started and how long it took to write: it completed then.
        u = turn.usage
        template["completed_at"] = created + round(((u.ttft_ms or 0) + (u.tpot_ms or 0) * u.completion_tokens) / 1000)
    return template


def call_names(text: str) -> set[str]:
    # A stored answer that is a function call names its function; the request's tool list is not stored.
    return set(re.findall(r'"name":\s*"([A-Za-z0-9_-]{1,64})"', text))


def turn_events(turn: Turn) -> list[ChatEvent]:
    """A stored turn as the events that made it, so reading it back is the same fold."""
    rid = turn.rid
    events = [ChatEvent(rid=rid, type="tool", tool=t) for t in turn.tools]
    if turn.thinking:
        events.append(ChatEvent(rid=rid, type="thinking", text=turn.thinking))
    if turn.answer:
        events.append(ChatEvent(rid=rid, type="delta", text=turn.answer))
    finish = STATUS_OF_TURN.get(turn.status)
    if finish == "stop" and turn.finish_reason:
        finish = turn.finish_reason  # 'length' reads back as incomplete, as it streamed
    if finish is None:
        info = ErrorInfo.of(ErrorCode.internal, "the response ended in an error")
        events.append(ChatEvent(rid=rid, type="error", error=info, usage=turn.usage))
    else:
        events.append(ChatEvent(rid=rid, type="done", finish_reason=finish, usage=turn.usage))  # type: ignore[arg-type]
    return events


def folded(encoder: ResponseEncoder, events: list[ChatEvent]) -> dict[str, Any]:
    encoder.begin()
    for e in events:
        encoder.on(e)
    return encoder.body()


def stored_body(response_id: str, turn: Turn, settings: GatewaySettings) -> dict[str, Any]:
    template = stored_template(response_id, turn, settings)
    return folded(ResponseEncoder(template, call_names(turn.answer)), turn_events(turn))


async def stored(gw: Gateway, tenant: str, user: str, response_id: str) -> tuple[ConversationReply, Turn]:
    chat_id, rid = chain_ids(response_id)
    missing = f"response {response_id!r}"
    conv = await ask(
        gw,
        subjects.CONVERSATION_GET,
        ConversationQuery(tenant=tenant, chat_id=chat_id, user=user),
        ConversationReply,
        tenant=tenant,
        missing=missing,
    )
    for turn in conv.turns:
        if turn.rid == rid:
            return conv, turn
    raise ApiError(ErrorCode.not_found, f"{missing} not found")


def function_call_ids(response: dict[str, Any]) -> set[str]:
    return {str(i["call_id"]) for i in response.get("output", []) if i.get("type") == "function_call"}


def check_call_outputs(body: ResponsesRequest, previous: str, answered: set[str]) -> None:
    """Each function_call_output answers a call of the previous response (or one echoed in this input)."""
    items = body.input if isinstance(body.input, list) else []
    known = answered | {i.call_id for i in items if i.type == "function_call" and i.call_id}
    for i, item in enumerate(items):
        if item.type == "function_call_output" and item.call_id not in known:
            raise ApiError(
                ErrorCode.bad_request,
                f"input[{i}]: function_call_output call_id {item.call_id!r} answers no function call of "
                f"response {previous!r}",
            )


async def previous_of(gw: Gateway, conn: HTTPConnection, key: ApiKey, previous: str) -> tuple[ConversationReply, Turn]:
    """The stored response `previous_response_id` names, in its conversation."""
    if not re.fullmatch(RESPONSE_ID_PATTERN, previous):
        raise PreviousResponseNotFound(previous, malformed=True)
    if previous in kept(conn).deleted:
        raise PreviousResponseNotFound(previous)
    try:
        return await stored(gw, key.tenant, key.user, previous)
    except ApiError as e:
        if e.code == ErrorCode.not_found:
            raise PreviousResponseNotFound(previous) from e
        raise


async def stored_chain(gw: Gateway, conn: HTTPConnection, key: ApiKey, body: ResponsesRequest, previous: str) -> str:
    """The conversation a response continues; its previous response must be its conversation's latest."""
    if re.fullmatch(RESPONSE_ID_PATTERN, previous) and local_run(gw, conn, previous, key.tenant) is not None:
        raise ApiError(ErrorCode.bad_request, f"previous_response_id {previous!r} is still in progress")
    conv, turn = await previous_of(gw, conn, key, previous)
    if conv.turns[-1].rid != turn.rid:
        raise ApiError(
            ErrorCode.bad_request,
            f"previous_response_id {previous!r} is not the latest response of its chain; "
            "branching from an earlier response is not served",
        )
    check_call_outputs(body, previous, function_call_ids(stored_body(previous, turn, gw.settings)))
    return conv.chat_id


@dataclass
class Continued:
    """A response kept on one WebSocket (store: false has no other home): the context a continuation of it
    starts from."""

    response_id: str
    system: str | None
    messages: list[ChatMessage]
    call_ids: set[str]


@dataclass
class Started:
    run: Run
    encoder: ResponseEncoder
    template: dict[str, Any]
    system: str | None
    messages: list[ChatMessage]


async def start_response(
    gw: Gateway,
    conn: HTTPConnection,
    key: ApiKey,
    body: ResponsesRequest,
    rid: str,
    *,
    route: str,
    continued: Continued | None = None,
) -> Started:
    """Check the request, find what it continues, start its run. `continued`: the connection-local response
    `previous_response_id` names (WebSocket mode), whose context is given whole instead of a stored chain."""
    model, mode = resolve_model(gw.settings, body.model)
    assert model is not None
    refuse_capabilities(body, model)
    refuse_unsupported(body)
    thinking = effort_ask(body.reasoning.effort if body.reasoning is not None else None)
    if body.background and (body.stream or not body.store):
        raise ApiError(ErrorCode.bad_request, "background responses need store: true and are not streamed")
    system, earlier, text = read_input(body.input)
    if continued is not None:
        check_call_outputs(body, continued.response_id, continued.call_ids)
        system = "\n\n".join(s for s in (continued.system, system) if s) or None
        earlier = [*continued.messages, *earlier]
    instructions = "\n\n".join(s for s in (body.instructions, system) if s) or None
    tools = body.tool_defs()
    tool_choice = choice_of(tools, body.named_choice())
    tool_names = {t.function.name for t in tools or []} if tool_choice != "none" else set()
    check_tool_grammars(
        [(f"tools[{i}].parameters", t.function.parameters) for i, t in enumerate(tools or [])], gw.settings.grammar
    )
    check_text(gw.settings, text, "the input's last message")
    fmt = body.text.format if body.text is not None else None
    asked = sampling(
        gw.settings,
        temperature=body.temperature,
        top_p=body.top_p,
        max_tokens=body.max_output_tokens,
        frequency_penalty=body.frequency_penalty,
        presence_penalty=body.presence_penalty,
        response_format=response_format_of(fmt.as_response_format() if fmt else None, None, gw.settings.grammar),
    )
    chat_id: str | None = None
    if body.previous_response_id is not None and continued is None:
        chat_id = await stored_chain(gw, conn, key, body, body.previous_response_id)
        response_id = f"{chat_id}_{rid}"
    else:
        response_id = f"resp_{rid}"
        chat_id = response_id if body.store else None
    choice = body.tool_choice
    echoed = choice.model_dump() if isinstance(choice, FunctionChoice) else choice or "auto"
    template = template_of(response_id, body, asked, echoed)
    run = await start_run(
        gw,
        conn,
        key,
        api="openai",
        route=route,
        text=text,
        chat_id=chat_id,
        messages=earlier,
        system=instructions,
        model=model,
        mode=mode,
        sampling=asked,
        client_tools=specs(tools),
        tool_choice=tool_choice,
        rid=rid,
        persist=body.store,
        parallel_tool_calls=body.parallel_tool_calls is not False,
        thinking=thinking,
    )
    kept(conn).put(rid, template, tool_names)
    messages = [*earlier, ChatMessage(role="user", content=text)]
    return Started(run, ResponseEncoder(template, tool_names), template, system, messages)


def continued_from(started: Started, response: dict[str, Any]) -> Continued:
    """What a continuation of this finished response on the same connection starts from."""
    answer = history_of(response)
    messages = [*started.messages, ChatMessage(role="assistant", content=answer)] if answer else started.messages
    return Continued(str(response["id"]), started.system, messages, function_call_ids(response))
