"""Chat templates: the model file's own (`tokenizer.chat_template`), or a named fallback.

A file's template is Jinja2, written for Hugging Face's `apply_chat_template`; it is rendered the way
HF renders it (sandboxed, trim_blocks and lstrip_blocks, loop controls, `raise_exception`,
`strftime_now`, a `tojson` that keeps non-ASCII text, `messages`, `tools`, `add_generation_prompt`,
`bos_token`, `eos_token`), so a template written for HF or llama.cpp renders the same here.

Tools: where the template itself renders `tools` they are passed to it; otherwise they go, in our
format (`tool_section`), at the head of the system message, which is where every prompt put them
before templates came from the file. The call the model answers with is `<tool_call>{json}</tool_call>`
in both cases (the gateway and the grammar read that form).

BOS: a template that writes `bos_token` itself and a tokenizer that adds BOS would give the model
two; where the tokenizer adds it, a leading `bos_token` is dropped from the rendered text
(llama.cpp's server does the same).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any

from jinja2 import Template, meta, nodes
from jinja2.ext import Extension
from jinja2.parser import Parser
from jinja2.sandbox import ImmutableSandboxedEnvironment

from switchyard.libs.tokenizer.literal import ControlSpellings, escape_values

# Named fallbacks for files without a template. "chatml": SmolLM2's / Qwen's turn format.
# "gemma": Gemma's documented turn format (user and model turns, <start_of_turn>/<end_of_turn>; no
# system role, so system text opens the next user turn). "plain": a role-prefixed transcript.
FALLBACK_TEMPLATES: dict[str, str] = {
    "chatml": (
        "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
    ),
    "gemma": (
        "{{ bos_token }}{% set ns = namespace(system='') %}"
        "{% for m in messages %}"
        "{% if m['role'] == 'system' %}{% set ns.system = ns.system + m['content'] + '\n\n' %}"
        "{% else %}"
        "{% set role = 'model' if m['role'] == 'assistant' else 'user' %}"
        "{% set text = (ns.system if role == 'user' else '') + m['content'] %}"
        "{% if role == 'user' %}{% set ns.system = '' %}{% endif %}"
        "{{ '<start_of_turn>' + role + '\n' + text + '<end_of_turn>\n' }}"
        "{% endif %}{% endfor %}"
        "{% if ns.system %}{{ '<start_of_turn>user\n' + ns.system + '<end_of_turn>\n' }}{% endif %}"
        "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
    ),
    "plain": (
        "{% for m in messages %}{{ m['role'] + ': ' + m['content'] + '\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}"
    ),
}
# Which fallback a model without a template gets, by a GGUF's `general.architecture` or a directory's
# `model_type` (Gemma 3's text-only checkpoints are "gemma3_text"); others get "plain".
FALLBACK_BY_ARCH = {"gemma": "gemma", "gemma2": "gemma", "gemma3": "gemma", "gemma3_text": "gemma"}


@dataclass(frozen=True)
class ModelTemplate:
    """One model's chat template and the values it is rendered with."""

    source: str
    # "file": the GGUF's own template; otherwise the FALLBACK_TEMPLATES name used.
    name: str = "file"
    bos_token: str = ""
    eos_token: str = ""
    # The tokenizer adds BOS itself: a BOS the template writes first is dropped.
    tokenizer_adds_bos: bool = False
    extra: Mapping[str, str] = field(default_factory=dict)
    # The vocabulary's control-token spellings: written in content they stay text (literal.py).
    controls: ControlSpellings = field(default_factory=lambda: ControlSpellings(()), compare=False)

    @property
    def from_file(self) -> bool:
        """Whether the model's own file defines this template (a chat model), not a fallback."""
        return self.name == "file"

    def reads(self, variable: str) -> bool:
        """Whether the template uses `variable` (a switch such as `enable_thinking` only works where it does)."""
        return variable in _variables(self.source)

    @property
    def renders_tools(self) -> bool:
        """Whether the template itself lays out `tools` (else they go in the system message)."""
        return "tools" in _variables(self.source)


def model_template(
    chat_template: str | None,
    architecture: str = "",
    bos_token: str = "",
    eos_token: str = "",
    tokenizer_adds_bos: bool = False,
    fallback: str | None = None,
) -> ModelTemplate:
    """The file's template if it has one, else the named `fallback` (default: by architecture)."""
    if chat_template:
        source, name = chat_template, "file"
    else:
        name = fallback or FALLBACK_BY_ARCH.get(architecture, "plain")
        if name not in FALLBACK_TEMPLATES:
            raise ValueError(f"unknown fallback chat template {name!r} (known: {', '.join(FALLBACK_TEMPLATES)})")
        source = FALLBACK_TEMPLATES[name]
    _compiled(source)  # a template that does not compile fails here, at load, not on a request
    return ModelTemplate(source, name, bos_token, eos_token, tokenizer_adds_bos)


def tool_section(tools: Sequence[Mapping[str, Any]]) -> str:
    """Our own description of callable tools, for templates that do not lay tools out themselves."""
    return (
        "# Tools\nYou may call one of these functions. To call one, reply with only "
        '<tool_call>{"name": <function name>, "arguments": <JSON object>}</tool_call>\n'
        + "\n".join(json.dumps(t, sort_keys=True) for t in tools)
    )


def with_tool_section(
    template: ModelTemplate, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None
) -> list[dict[str, Any]]:
    """The messages the template is given: for a template that does not render tools, the tool
    section heads the system message (one is added first where there is none)."""
    out = [dict(m) for m in messages]
    if not tools or template.renders_tools:
        return out
    section = tool_section(tools)
    if out and out[0].get("role") == "system":
        rest = str(out[0].get("content") or "")
        out[0]["content"] = f"{section}\n\n{rest}" if rest else section
    else:
        out.insert(0, {"role": "system", "content": section})
    return out


def render_prompt(
    model_template: ModelTemplate,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    add_generation_prompt: bool = True,
    template_kwargs: Mapping[str, Any] | None = None,
) -> str:
    """The prompt text for `messages` (dicts with at least role and content) under this model's template.
    `template_kwargs` are further variables, as HF's `apply_chat_template(**kwargs)` passes them (Qwen3's
    `enable_thinking`); they cannot replace the ones above."""
    msgs = escape_values(with_tool_section(model_template, messages, tools), model_template.controls)
    tools = escape_values(tools, model_template.controls) if tools else tools
    fixed = {
        "messages": msgs,
        "tools": list(tools) if tools and model_template.renders_tools else None,
        "add_generation_prompt": add_generation_prompt,
        "bos_token": model_template.bos_token,
        "eos_token": model_template.eos_token,
    }
    text = _compiled(model_template.source).render({**model_template.extra, **(template_kwargs or {}), **fixed})
    bos = model_template.bos_token
    if model_template.tokenizer_adds_bos and bos and text.startswith(bos):
        text = text[len(bos) :]
    return text


def continue_final_message(rendered: str, final: str) -> str:
    """HF's `continue_final_message` (what vLLM's does too): the rendered chat cut right after the final
    message's text, so the prompt ends inside that message and the model continues it. Where the template
    trimmed the text's trailing whitespace, the cut is after the trimmed text."""
    stripped = final.strip()
    if not stripped or stripped not in rendered:
        raise TemplateError("the final message does not appear in the chat as the template renders it")
    at = rendered.rindex(stripped)
    kept = final.lstrip()
    if rendered[at : at + len(kept)] == kept:
        return rendered[: at + len(kept)]
    return rendered[: at + len(stripped)]


def render_continuing(
    model_template: ModelTemplate,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    template_kwargs: Mapping[str, Any] | None = None,
) -> str:
    """The prompt for `messages` whose last one (the assistant's start of an answer) the model continues."""
    rendered = render_prompt(model_template, messages, tools, False, template_kwargs)
    return continue_final_message(rendered, str(messages[-1].get("content") or ""))


def _raise(message: str) -> None:
    raise TemplateError(message)


class TemplateError(ValueError):
    """The template refused these messages (its `raise_exception`), e.g. roles out of order."""


def _tojson(value: Any, indent: int | None = None, separators: Any = None, sort_keys: bool = False) -> str:
    # HF's tojson: non-ASCII kept as is (Jinja's own escapes it and HTML-escapes <, >, &).
    return json.dumps(value, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)


class _Generation(Extension):
    """`{% generation %}...{% endgeneration %}`: HF templates mark the assistant's tokens with it (for
    training masks); rendering a prompt it is a plain block."""

    tags = {"generation"}

    def parse(self, parser: Parser) -> nodes.CallBlock:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        block = nodes.CallBlock(self.call_method("_block"), [], [], body)
        block.set_lineno(lineno)
        return block

    def _block(self, caller: Any) -> str:
        return str(caller())


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols", _Generation]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


_ENV = _environment()


@lru_cache(maxsize=32)
def _compiled(source: str) -> Template:
    return _ENV.from_string(source)


@lru_cache(maxsize=32)
def _variables(source: str) -> frozenset[str]:
    return frozenset(meta.find_undeclared_variables(_ENV.parse(source)))
