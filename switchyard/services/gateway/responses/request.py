"""What `POST /v1/responses` takes: the request body, and its `input` items read into the pipeline's
(system, earlier messages, new user text), the way `split_messages` reads Chat Completions messages."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from switchyard.schemas import ChatMessage, ErrorCode
from switchyard.services.gateway.errors import ApiError
from switchyard.services.gateway.params import Strict
from switchyard.services.gateway.response_format import JsonSchemaFormat, ResponseFormatIn
from switchyard.services.gateway.responses import compaction
from switchyard.services.gateway.tool_calls import FunctionDef, NamedChoice, ToolDef, render_call

RESPONSE_ID_PATTERN = r"^resp_[0-9a-f]{32}(_[0-9a-f]{32})?$"
CALL_ID = Annotated[str, Field(min_length=1, max_length=128)]


# Content parts a text model cannot read: refused by name (`refuse_media`), before any other check.
MEDIA_PARTS = ("input_image", "input_file", "input_audio", "input_video")


class InputPart(Strict):
    # An echoed output_text part carries these; they say nothing the model needs.
    IGNORED = frozenset({"annotations", "logprobs"})
    type: Literal["input_text", "output_text", "text", "reasoning_text", "summary_text", "refusal", *MEDIA_PARTS]  # type: ignore[valid-type]
    text: str | None = None
    refusal: str | None = None


class InputItem(Strict):
    """A message, a function call the model made (echoed back), its output (the client ran it), or an
    echoed reasoning or server-tool item (already part of the answer it came with: dropped)."""

    IGNORED = frozenset({"id", "status", "summary", "server_label", "error", "phase", "created_by"})
    type: Literal[
        "message", "function_call", "function_call_output", "reasoning", "mcp_call", "compaction", "item_reference"
    ] = "message"
    role: Literal["user", "system", "developer", "assistant"] | None = None
    content: str | list[InputPart] | None = None
    call_id: CALL_ID | None = None
    name: str | None = Field(None, max_length=128)
    arguments: str | None = None
    output: str | list[InputPart] | None = None
    # A reasoning item's (dropped with it), or a compaction item's: the earlier turns it stands for.
    encrypted_content: str | None = Field(None, max_length=10 * 1024 * 1024)


class FunctionTool(Strict):
    type: Literal["function"]
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = Field(None, max_length=4096)
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    def as_tool_def(self) -> ToolDef:
        return ToolDef(
            function=FunctionDef(name=self.name, description=self.description or "", parameters=self.parameters or {})
        )


class OtherTool(Strict):
    """A built-in tool type (web_search, file_search, mcp, ...): read only to refuse it by name."""

    type: str = Field(max_length=64)


class FunctionChoice(Strict):
    type: Literal["function"]
    name: str = Field(max_length=64)


class OtherChoice(Strict):
    type: str = Field(max_length=64)


class TextFormat(Strict):
    IGNORED = frozenset({"description"})
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = Field(None, min_length=1, max_length=64)
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None

    def as_response_format(self) -> ResponseFormatIn:
        if self.type != "json_schema":
            return ResponseFormatIn(type=self.type)
        if self.name is None or self.schema_ is None:
            raise ApiError(ErrorCode.bad_request, "text.format of type json_schema needs its name and schema")
        schema = JsonSchemaFormat.model_validate({"name": self.name, "schema": self.schema_, "strict": self.strict})
        return ResponseFormatIn(type="json_schema", json_schema=schema)


class TextConfig(Strict):
    IGNORED = frozenset({"verbosity"})
    format: TextFormat | None = None


class ReasoningConfig(Strict):
    # The reasoning is given as it is (reasoning_text), never summarised.
    IGNORED = frozenset({"summary", "generate_summary"})
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None


class ResponsesRequest(Strict):
    IGNORED = frozenset(
        {
            "user",
            "include",
            # HTTP streaming's options (obfuscation padding): events are sent as they are.
            "stream_options",
        }
    )
    model: str = Field(min_length=1, max_length=200)
    input: str | list[InputItem]
    instructions: str | None = None
    tools: list[FunctionTool | OtherTool] | None = Field(None, max_length=128)
    tool_choice: Literal["auto", "none", "required"] | FunctionChoice | OtherChoice | None = None
    # OpenAI's default: an answer may carry several calls; false: at most one.
    parallel_tool_calls: bool | None = Field(None, strict=True)
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    # Function calls one answer may make (the pipeline's own tools run before the model and are not counted).
    max_tool_calls: int | None = Field(None, ge=1, le=128)
    # One tier serves every request (a key's tier sets its limits): echoed as `default`.
    service_tier: Literal["auto", "default", "flex", "priority"] | None = None
    # Echoed: the prefix cache is automatic, and the key already names who asks.
    safety_identifier: str | None = Field(None, max_length=64)
    prompt_cache_key: str | None = Field(None, max_length=64)
    # The context service trims a stored chain's oldest turns to the prompt budget: 'auto' describes it;
    # 'disabled' is taken and echoed (a request that cannot fit at all is refused either way).
    truncation: Literal["auto", "disabled"] | None = None
    stream: bool = Field(False, strict=True)
    store: bool = Field(True, strict=True)
    background: bool = Field(False, strict=True)
    # Checked against RESPONSE_ID_PATTERN where it is looked up (an id not of ours is not found, by name).
    previous_response_id: str | None = Field(None, max_length=128)
    metadata: dict[Annotated[str, Field(max_length=64)], Annotated[str, Field(max_length=512)]] | None = Field(
        None, max_length=16
    )

    def function_tools(self) -> list[FunctionTool]:
        return [t for t in self.tools or [] if isinstance(t, FunctionTool)]

    def tool_defs(self) -> list[ToolDef] | None:
        return [t.as_tool_def() for t in self.function_tools()] or None

    def named_choice(self) -> str | NamedChoice | None:
        if isinstance(self.tool_choice, FunctionChoice):
            return NamedChoice(function={"name": self.tool_choice.name})
        assert not isinstance(self.tool_choice, OtherChoice)  # refused by refuse_capabilities
        return self.tool_choice


class CompactRequest(Strict):
    """`POST /v1/responses/compact`: the conversation to compact."""

    IGNORED = frozenset({"prompt_cache_key"})
    model: str = Field(min_length=1, max_length=200)
    input: str | list[InputItem] | None = None
    previous_response_id: str | None = Field(None, max_length=128)
    instructions: str | None = None


def _media(parts: str | list[InputPart] | None, where: str) -> str | None:
    for j, part in enumerate(parts if isinstance(parts, list) else []):
        if part.type in MEDIA_PARTS:
            return f"{where}[{j}] is an {part.type} part"
    return None


def refuse_media(given: str | list[InputItem] | None, model: str) -> None:
    """Input a text model cannot read, and references to items this server does not keep, named (400)."""
    for i, item in enumerate(given if isinstance(given, list) else []):
        found = _media(item.content, f"input[{i}].content") or _media(item.output, f"input[{i}].output")
        if found:
            raise ApiError(ErrorCode.bad_request, f"model {model!r} takes text only: {found}")
        if item.type == "item_reference":
            raise ApiError(
                ErrorCode.bad_request,
                f"input[{i}]: item_reference items are not served; send the item itself "
                "(or previous_response_id to continue a stored response)",
            )


def refuse_capabilities(body: ResponsesRequest, model: str) -> None:
    """What the request asks that this server cannot do, named in the one error shape (400) before anything
    else reads it: media input to a text model, built-in tools, item references."""
    refuse_media(body.input, model)
    for i, tool in enumerate(body.tools or []):
        if isinstance(tool, OtherTool):
            raise ApiError(
                ErrorCode.bad_request,
                f"tools[{i}]: tool type {tool.type!r} is not served: this server takes function tools only "
                "(its own tools run in the pipeline; GET /v1/tools lists them)",
            )
    if isinstance(body.tool_choice, OtherChoice):
        raise ApiError(
            ErrorCode.bad_request,
            f"tool_choice of type {body.tool_choice.type!r} is not served (function tools only)",
        )


def _text(content: str | list[InputPart] | None) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    texts = []
    for part in content:
        if part.type == "reasoning_text" or part.type == "summary_text":
            continue
        texts.append(part.text or part.refusal or "")
    return "".join(texts)


def read_items(given: list[InputItem]) -> tuple[str | None, list[ChatMessage]]:
    """(system text from system/developer and compaction items, the conversation's messages in order)."""
    system: list[str] = []
    turns: list[ChatMessage] = []
    for i, item in enumerate(given):
        if item.type == "compaction":
            if item.encrypted_content is None:
                raise ApiError(ErrorCode.bad_request, f"input[{i}]: a compaction item needs its encrypted_content")
            system.append(compaction.as_instructions(compaction.decode(item.encrypted_content, f"input[{i}]")))
        elif item.type == "message":
            if item.role is None:
                raise ApiError(ErrorCode.bad_request, "an input message needs its role")
            if item.role in ("system", "developer"):
                system.append(_text(item.content))
            else:
                turns.append(ChatMessage(role=item.role, content=_text(item.content)))
        elif item.type == "function_call":
            call = render_call(item.name or "", item.arguments or "")
            if turns and turns[-1].role == "assistant":  # the call belongs to the message before it
                turns[-1] = ChatMessage(role="assistant", content=turns[-1].content + call)
            else:
                turns.append(ChatMessage(role="assistant", content=call))
        elif item.type == "function_call_output":
            if item.call_id is None:
                raise ApiError(ErrorCode.bad_request, "a function_call_output item needs its call_id")
            turns.append(ChatMessage(role="tool", content=_text(item.output)))
    return ("\n\n".join(system) or None), turns


def read_input(given: str | list[InputItem]) -> tuple[str | None, list[ChatMessage], str]:
    """(system text, earlier messages, the new user text). The input ends with a user message or with function
    call outputs, which become the new turn marked as the call's result."""
    if isinstance(given, str):
        return None, [], given
    system, turns = read_items(given)
    # The new turn: the last user message, or every function output after the model's last call.
    results: list[str] = []
    while turns and turns[-1].role == "tool":
        results.insert(0, turns.pop().content)
    if results:
        text = "\n".join(f"Result of the function call: {r}" for r in results)
    elif turns and turns[-1].role == "user":
        text = turns.pop().content
    else:
        raise ApiError(ErrorCode.bad_request, "input must end with a user message or a function_call_output")
    return system, turns, text
