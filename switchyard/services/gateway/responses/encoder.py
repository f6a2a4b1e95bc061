"""The Responses API's one renderer: a run's events as OpenAI's typed stream events, and the whole
`Response` as the fold of those same events.

`ResponseEncoder` turns each `ChatEvent` into `response.*` events (each with its `sequence_number`) and
feeds every event it makes to its own `Fold`; the terminal event (`response.completed`, `.incomplete`,
`.failed`) carries the fold's response. A non-streaming body, a background response read back, and a
stored one are all that fold: nothing here derives a response a second way.
"""

from __future__ import annotations

import copy
import json
import time
from typing import Any

from sse_starlette import ServerSentEvent

from switchyard.schemas import ChatEvent, ErrorCode, ErrorInfo, ToolEvent, Usage
from switchyard.services.gateway.runs.relay import Encoder, sse
from switchyard.services.gateway.tool_calls import parse_calls

# What OpenAI names our error codes in a failed response's `error.code` (the SDK knows only its own).
ERROR_CODES = {ErrorCode.rate_limited: "rate_limit_exceeded", ErrorCode.bad_request: "invalid_prompt"}
# Our server-side tools run inside the pipeline: each becomes an `mcp_call` item of this server label.
SERVER_LABEL = "switchyard"
TERMINAL = ("response.completed", "response.incomplete", "response.failed")


def usage_json(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    }


class Fold:
    """A `Response` built from its stream events, in order: what a client reading the stream would hold."""

    def __init__(self) -> None:
        self.response: dict[str, Any] = {}

    def apply(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind.startswith("response.") and "response" in event:
            # created, queued, in_progress and the terminal events carry the response whole.
            self.response = copy.deepcopy(event["response"])
            return
        output: list[dict[str, Any]] = self.response["output"]
        if kind == "response.output_item.added":
            output.insert(event["output_index"], copy.deepcopy(event["item"]))
        elif kind == "response.output_item.done":
            output[event["output_index"]] = copy.deepcopy(event["item"])
        elif kind == "response.content_part.added":
            output[event["output_index"]]["content"].insert(event["content_index"], copy.deepcopy(event["part"]))
        elif kind == "response.content_part.done":
            output[event["output_index"]]["content"][event["content_index"]] = copy.deepcopy(event["part"])
        elif kind in ("response.output_text.delta", "response.reasoning_text.delta"):
            output[event["output_index"]]["content"][event["content_index"]]["text"] += event["delta"]
        elif kind in ("response.output_text.done", "response.reasoning_text.done"):
            output[event["output_index"]]["content"][event["content_index"]]["text"] = event["text"]
        elif kind == "response.function_call_arguments.delta":
            output[event["output_index"]]["arguments"] += event["delta"]
        elif kind == "response.function_call_arguments.done":
            output[event["output_index"]]["arguments"] = event["arguments"]


def fold(events: list[dict[str, Any]]) -> dict[str, Any]:
    f = Fold()
    for e in events:
        f.apply(e)
    return f.response


class ResponseEncoder(Encoder):
    """OpenAI's Responses stream for one run. `template` is the response as created (id, model and the
    request's parameters echoed, `output` empty); `tool_names` are the client's function tools, whose calls
    the answer's text may turn out to be (that text is held until it is complete)."""

    def __init__(self, template: dict[str, Any], tool_names: set[str] | None = None, status: str = "in_progress"):
        self.template = template
        self.id = str(template["id"]).removeprefix("resp_")
        self.tool_names = tool_names or set()
        self.status = status
        self.fold = Fold()
        self.events: list[dict[str, Any]] = []
        self.held: list[str] = []
        self.open: dict[str, Any] | None = None  # the message or reasoning item being written
        self.tools: dict[str, int] = {}  # a server tool's id -> its item's output index
        self.items = 0
        self.ended = False

    # ---- framing ---------------------------------------------------------------------------

    def _emit(self, kind: str, **data: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": len(self.events), **data}
        self.events.append(event)
        self.fold.apply(event)
        return event

    def frames(self, events: list[dict[str, Any]]) -> list[ServerSentEvent]:
        return [sse(e, event=e["type"]) for e in events]

    def opening(self) -> list[ServerSentEvent]:
        return self.frames(self.begin())

    def encode(self, index: int, seq: int, event: ChatEvent) -> list[ServerSentEvent]:
        return self.frames(self.on(event))

    def closing(self) -> list[ServerSentEvent]:
        # Open Responses ends a stream with the literal `[DONE]` (OpenAI's SDK reads it as the end too).
        return [sse("[DONE]")]

    # ---- events ----------------------------------------------------------------------------

    def begin(self) -> list[dict[str, Any]]:
        response = {**self.template, "status": self.status, "output": []}
        first = "response.queued" if self.status == "queued" else "response.created"
        out = [self._emit(first, response=response)]
        if self.status != "queued":
            out.append(self._emit("response.in_progress", response=response))
        return out

    def on(self, event: ChatEvent) -> list[dict[str, Any]]:
        if self.ended:
            return []
        if event.type == "thinking":
            return [*self._switch("reasoning"), self._delta("response.reasoning_text.delta", event.text)]
        if event.type == "delta" and self.tool_names:
            self.held.append(event.text)
            return []
        if event.type == "delta":
            return [*self._switch("message"), self._delta("response.output_text.delta", event.text)]
        if event.type == "tool" and event.tool is not None:
            return self._tool(event.tool)
        if event.type == "done":
            return self._done(event)
        if event.type == "error":
            return self._failed(event.error or ErrorInfo.of(ErrorCode.internal, "unknown error"), event.usage)
        return []

    def _switch(self, kind: str) -> list[dict[str, Any]]:
        """Open an item of `kind` (message or reasoning) unless one is open; close the other kind first."""
        if self.open is not None and self.open["item"]["type"] == kind:
            return []
        out = self._close()
        index = self.items
        self.items += 1
        if kind == "reasoning":
            item = {"id": f"rs_{self.id}_{index}", "type": "reasoning", "summary": [], "content": []}
            part: dict[str, Any] = {"type": "reasoning_text", "text": ""}
        else:
            item = {"id": f"msg_{self.id}_{index}", "type": "message", "role": "assistant", "content": []}
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        item["status"] = "in_progress"
        self.open = {"item": item, "index": index, "text": []}
        out.append(self._emit("response.output_item.added", output_index=index, item=item))
        out.append(
            self._emit(
                "response.content_part.added", item_id=item["id"], output_index=index, content_index=0, part=part
            )
        )
        return out

    def _delta(self, kind: str, text: str) -> dict[str, Any]:
        assert self.open is not None
        self.open["text"].append(text)
        extra: dict[str, Any] = {"logprobs": []} if kind == "response.output_text.delta" else {}
        item_id = self.open["item"]["id"]
        return self._emit(kind, item_id=item_id, output_index=self.open["index"], content_index=0, delta=text, **extra)

    def _close(self, status: str = "completed") -> list[dict[str, Any]]:
        if self.open is None:
            return []
        item, index, text = self.open["item"], self.open["index"], "".join(self.open["text"])
        self.open = None
        ids = {"item_id": item["id"], "output_index": index, "content_index": 0}
        if item["type"] == "reasoning":
            part: dict[str, Any] = {"type": "reasoning_text", "text": text}
            done = self._emit("response.reasoning_text.done", **ids, text=text)
        else:
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
            done = self._emit("response.output_text.done", **ids, text=text, logprobs=[])
        return [
            done,
            self._emit("response.content_part.done", **ids, part=part),
            self._emit(
                "response.output_item.done", output_index=index, item={**item, "content": [part], "status": status}
            ),
        ]

    def _tool(self, tool: ToolEvent) -> list[dict[str, Any]]:
        """A server-side tool step: added when it starts, done with its output when it ends."""
        out: list[dict[str, Any]] = []
        item = {
            "id": f"mcp_{self.id}_{tool.id}"[:64],
            "type": "mcp_call",
            "server_label": SERVER_LABEL,
            "name": tool.name,
            "arguments": json.dumps(tool.arguments),
            "output": None,
            "error": None,
            "status": "calling",
        }
        if tool.id not in self.tools:
            out += self._close()
            self.tools[tool.id] = self.items
            self.items += 1
            out.append(self._emit("response.output_item.added", output_index=self.tools[tool.id], item=item))
        if tool.status != "running":
            ok = tool.status == "ok"
            item.update(
                output=tool.output if ok else None,
                error=None if ok else (tool.output or tool.status),
                status="completed" if ok else "failed",
            )
            out.append(self._emit("response.output_item.done", output_index=self.tools[tool.id], item=item))
        return out

    def _held(self) -> list[dict[str, Any]]:
        """The held answer, now complete: its function calls if it makes any, else the message it is."""
        held = "".join(self.held)
        self.held = []
        # `parallel_tool_calls: false` keeps the first call only; `max_tool_calls` as many as it says.
        limits = [self.template.get("max_tool_calls")]
        if not self.template.get("parallel_tool_calls", True):
            limits.append(1)
        limit = min((n for n in limits if n is not None), default=None)
        calls = parse_calls(held, self.tool_names, limit) if self.tool_names else []
        if not calls:
            return [*self._switch("message"), self._delta("response.output_text.delta", held)] if held else []
        out = self._close()
        rid = self.id.rsplit("_", 1)[-1]
        for n, call in enumerate(calls):
            index = self.items
            self.items += 1
            fn = call["function"]
            item = {
                "id": f"fc_{self.id}_{index}",
                "type": "function_call",
                # From the response's rid, not random: the response read back later names the same calls.
                "call_id": f"call_{rid[:24]}" + (f"_{n}" if n else ""),
                "name": fn["name"],
                "arguments": "",
                "status": "in_progress",
            }
            ids = {"item_id": item["id"], "output_index": index}
            out.append(self._emit("response.output_item.added", output_index=index, item=item))
            out.append(self._emit("response.function_call_arguments.delta", **ids, delta=fn["arguments"]))
            out.append(self._emit("response.function_call_arguments.done", **ids, arguments=fn["arguments"]))
            done = {**item, "arguments": fn["arguments"], "status": "completed"}
            out.append(self._emit("response.output_item.done", output_index=index, item=done))
        return out

    def _done(self, event: ChatEvent) -> list[dict[str, Any]]:
        finish = event.finish_reason or "stop"
        out = [*self._held()]
        complete = finish == "stop"
        out += self._close("completed" if complete else "incomplete")
        if finish == "stop":
            kind, status, details = "response.completed", "completed", None
        elif finish == "cancelled":
            kind, status, details = "response.incomplete", "cancelled", None
        else:
            reason = "max_output_tokens" if finish == "length" else "content_filter"
            kind, status, details = "response.incomplete", "incomplete", {"reason": reason}
        return [*out, self._end(kind, status, event.usage, incomplete_details=details)]

    def _failed(self, error: ErrorInfo, usage: Usage | None) -> list[dict[str, Any]]:
        out = [*self._held(), *self._close("incomplete")]
        failure = {"code": ERROR_CODES.get(error.code, "server_error"), "message": error.message}
        return [*out, self._end("response.failed", "failed", usage, error=failure)]

    def _end(self, kind: str, status: str, usage: Usage | None, **fields: Any) -> dict[str, Any]:
        self.ended = True
        response = {**self.fold.response, "status": status, "usage": usage_json(usage or Usage()), **fields}
        if status == "completed":
            # A stored response read back completed when its turn says; a live one, now.
            response["completed_at"] = self.template.get("completed_at") or int(time.time())
        return self._emit(kind, response=response)

    def body(self) -> dict[str, Any]:
        """The whole response: the fold of every event made so far (in progress when the run is)."""
        return fold(self.events)
