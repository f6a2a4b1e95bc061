"""What `POST /v1/responses` takes: the request body, and its `input` items read into the pipeline's
(system, earlier messages, new user text), the way `split_messages` reads Chat Completions messages."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from switchyard.schemas import ChatMessage, ErrorCode
from switchyard.services.gateway.errors import ApiError
from switchyard.services.gateway.params import Strict
from switchyard.services.gateway.response_format import JsonSchemaFormat, ResponseFormatIn
from switchyard.services.gateway.tool_calls import FunctionDef, NamedChoice, ToolDef, render_call

RESPONSE_ID_PATTERN = r"^resp_[0-9a-f]{32}(_[0-9a-f]{32})?$"
CALL_ID = Annotated[str, Field(min_length=1, max_length=128)]


class InputPart(Strict):
    # An echoed output_text part carries these; they say nothing the model needs.
    IGNORED = frozenset({"annotations", "logprobs"})
    type: Literal["input_text", "output_text", "text", "reasoning_text", "summary_text", "refusal"]
    text: str | None = None
    refusal: str | None = None


class InputItem(Strict):
    """A message, a function call the model made (echoed back), its output (the client ran it), or an
    echoed reasoning or server-tool item (already part of the answer it came with: dropped)."""

    IGNORED = frozenset({"id", "status", "summary", "encrypted_content", "server_label", "error", "phase"})
    type: Literal["message", "function_call", "function_call_output", "reasoning", "mcp_call"] = "message"
    role: Literal["user", "system", "developer", "assistant"] | None = None
    content: str | list[InputPart] | None = None
    call_id: CALL_ID | None = None
    name: str | None = Field(None, max_length=128)
    arguments: str | None = None
    output: str | list[InputPart] | None = None


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


class FunctionChoice(Strict):
    type: Literal["function"]
    name: str = Field(max_length=64)


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
            "service_tier",
            "prompt_cache_key",
            "safety_identifier",
            "truncation",
            "include",
        }
    )
    model: str = Field(min_length=1, max_length=200)
    input: str | list[InputItem]
    instructions: str | None = None
    tools: list[FunctionTool] | None = Field(None, max_length=128)
    tool_choice: Literal["auto", "none", "required"] | FunctionChoice | None = None
    # OpenAI's default: an answer may carry several calls; false: at most one.
    parallel_tool_calls: bool | None = Field(None, strict=True)
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stream: bool = Field(False, strict=True)
    store: bool = Field(True, strict=True)
    background: bool = Field(False, strict=True)
    previous_response_id: str | None = Field(None, pattern=RESPONSE_ID_PATTERN)
    metadata: dict[Annotated[str, Field(max_length=64)], Annotated[str, Field(max_length=512)]] | None = Field(
        None, max_length=16
    )

    def tool_defs(self) -> list[ToolDef] | None:
        return [t.as_tool_def() for t in self.tools] if self.tools else None

    def named_choice(self) -> str | NamedChoice | None:
        if isinstance(self.tool_choice, FunctionChoice):
            return NamedChoice(function={"name": self.tool_choice.name})
        return self.tool_choice


def _text(content: str | list[InputPart] | None) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    texts = []
    for part in content:
        if part.type == "reasoning_text" or part.type == "summary_text":
            continue
        texts.append(part.text or part.refusal or "")
    return "".join(texts)


def read_input(given: str | list[InputItem]) -> tuple[str | None, list[ChatMessage], str]:
    """(system text from system/developer items, earlier messages, the new user text). The input ends with
    a user message or with function call outputs, which become the new turn marked as the call's result."""
    if isinstance(given, str):
        return None, [], given
    system: list[str] = []
    turns: list[ChatMessage] = []
    for item in given:
        if item.type == "message":
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
    return ("\n\n".join(system) or None), turns, text
