"""Chat templates from the file (SmolLM2's ChatML), the named fallback (Gemma 3 base has none), tools,
BOS handling, the sandbox, and the prefix stability prompt caching relies on."""

from __future__ import annotations

import pytest
from jinja2.exceptions import SecurityError

from switchyard.libs.tokenizer import (
    TemplateError,
    Tokenizer,
    load_tokenizer,
    model_template,
    render_prompt,
    tool_section,
)
from switchyard.libs.tokenizer.template import FALLBACK_TEMPLATES
from tests.tokenizer.models import gemma3_path

TOOLS = [
    {
        "type": "function",
        "function": {"name": "weather", "description": "Météo à Zürich <now>", "parameters": {"type": "object"}},
    }
]
# A template that lays tools out itself (Hermes/Qwen style), as a GGUF may carry.
TOOLS_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\n# Tools\\n<tools>' }}"
    "{%- for t in tools %}{{- '\\n' + (t | tojson) }}{%- endfor %}{{- '\\n</tools><|im_end|>\\n' }}{%- endif %}"
    "{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello!"},
    {"role": "user", "content": "Bye"},
]


@pytest.fixture(scope="module")
def smollm() -> Tokenizer:
    return load_tokenizer()


@pytest.fixture(scope="module")
def gemma() -> Tokenizer:
    try:
        return load_tokenizer(gemma3_path())
    except FileNotFoundError as e:
        pytest.skip(str(e))


def test_smollm_uses_its_file_template(smollm):
    t = smollm.template
    assert t.from_file and smollm.has_chat_template and not t.renders_tools
    assert t.source == smollm._meta.chat_template


def test_tools_head_the_system_message_when_the_template_does_not_render_them(smollm):
    section = tool_section(TOOLS)
    out = smollm.apply_chat_template(CONVERSATION, tools=TOOLS)
    assert out.startswith(f"<|im_start|>system\n{section}\n\nBe brief.<|im_end|>\n")
    # No system message: the section becomes one (and the template's default system text is not added).
    only_user = smollm.apply_chat_template([{"role": "user", "content": "x"}], tools=TOOLS)
    assert only_user.startswith(f"<|im_start|>system\n{section}<|im_end|>\n<|im_start|>user\nx")


def test_a_template_that_renders_tools_gets_them():
    t = model_template(TOOLS_TEMPLATE)
    assert t.renders_tools
    out = render_prompt(t, CONVERSATION[1:2], TOOLS)
    # tojson as HF's: non-ASCII kept, nothing HTML-escaped.
    assert '"description": "Météo à Zürich <now>"' in out
    assert "You may call one of these functions" not in out
    assert out.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert "<tools>" not in render_prompt(t, CONVERSATION[1:2], None)


def test_renders_like_transformers():
    """The same template and inputs through transformers' renderer give the same text."""
    chat_template_utils = pytest.importorskip("transformers.utils.chat_template_utils")
    for source, tools in ((TOOLS_TEMPLATE, TOOLS), (load_tokenizer().template.source, None)):
        ours = render_prompt(model_template(source, bos_token="<s>", eos_token="</s>"), CONVERSATION, tools)
        theirs = chat_template_utils.render_jinja_template(
            conversations=[CONVERSATION],
            tools=tools,
            chat_template=source,
            add_generation_prompt=True,
            bos_token="<s>",
            eos_token="</s>",
        )[0][0]
        assert ours == theirs


def test_gemma_base_gets_the_named_gemma_fallback(gemma):
    t = gemma.template
    assert t.name == "gemma" and not t.from_file and not gemma.has_chat_template
    out = gemma.apply_chat_template(CONVERSATION)
    # No <bos> in the text: the tokenizer adds it (one BOS, not two).
    assert out == (
        "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
        "<start_of_turn>model\nHello!<end_of_turn>\n"
        "<start_of_turn>user\nBye<end_of_turn>\n"
        "<start_of_turn>model\n"
    )
    ids = gemma.encode(out)
    assert ids[:2] == [gemma.bos_token_id, gemma.token_to_id("<start_of_turn>")]
    assert ids.count(gemma.bos_token_id) == 1
    # A model turn ends at <end_of_turn>, as llama.cpp stops there.
    assert gemma.token_to_id("<end_of_turn>") in gemma.eos_token_ids and gemma.eos_token_id in gemma.eos_token_ids


def test_bos_written_by_a_template_is_kept_only_where_the_tokenizer_does_not_add_one():
    src = "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"
    msgs = [{"role": "user", "content": "x"}]
    assert render_prompt(model_template(src, bos_token="<bos>", tokenizer_adds_bos=True), msgs) == "x"
    assert render_prompt(model_template(src, bos_token="<bos>", tokenizer_adds_bos=False), msgs) == "<bos>x"


def test_fallbacks_by_name_and_unknown_names_refused():
    assert model_template(None, "llama").name == "plain"
    assert model_template(None, "gemma3").name == "gemma"
    assert model_template(None, "llama", fallback="chatml").source == FALLBACK_TEMPLATES["chatml"]
    with pytest.raises(ValueError, match="unknown fallback"):
        model_template(None, fallback="nope")
    plain = render_prompt(model_template(None), CONVERSATION[1:2])
    assert plain == "user: Hi\nassistant: "


def test_raise_exception_and_the_sandbox():
    strict = model_template("{% if messages[0].role != 'user' %}{{ raise_exception('user first') }}{% endif %}ok")
    with pytest.raises(TemplateError, match="user first"):
        render_prompt(strict, CONVERSATION)
    assert render_prompt(strict, CONVERSATION[1:]) == "ok"
    # A template from a file is untrusted code: no reaching Python internals.
    evil = model_template("{{ messages.__class__.__mro__[1].__subclasses__() }}")
    with pytest.raises(SecurityError):
        render_prompt(evil, CONVERSATION)
    with pytest.raises(SecurityError):
        render_prompt(model_template("{% set x = messages.append(1) %}"), CONVERSATION)


def test_generation_blocks_render_plainly():
    t = model_template("{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}")
    assert render_prompt(t, CONVERSATION) == "Be brief.HiHello!Bye"


@pytest.mark.parametrize("which", ["smollm", "gemma"])
def test_turn_two_starts_with_turn_one_and_its_answer(which, request):
    """Prompt caching relies on it: turn N+1's prompt is turn N's prompt, the answer, then more."""
    tok: Tokenizer = request.getfixturevalue(which)
    msgs: list[dict[str, str]] = [{"role": "system", "content": "Be brief."}]
    prev = None
    for n in range(4):
        msgs.append({"role": "user", "content": f"question {n} ✓"})
        prompt = tok.apply_chat_template(msgs, tools=TOOLS)
        if prev is not None:
            assert prompt.startswith(prev[0] + prev[1])
            # ... and so do its tokens (the KV blocks reused are token blocks).
            assert tok.encode(prompt)[: len(tok.encode(prev[0]))] == tok.encode(prev[0])
        answer = f"answer {n} ✓"
        msgs.append({"role": "assistant", "content": answer})
        prev = (prompt, answer)
