"""Continuing the final message (Anthropic's prefill, vLLM's `continue_final_message`): the prompt ends inside
the assistant's text, cut exactly where Hugging Face's `apply_chat_template(continue_final_message=True)`
cuts it, for the model's own template and the fallbacks."""

from __future__ import annotations

from typing import Any

import pytest
from tokenizers import Tokenizer as HfTokenizer
from tokenizers.models import BPE
from transformers import PreTrainedTokenizerFast

from switchyard.libs.tokenizer import TemplateError, load_tokenizer, model_template, render_continuing
from switchyard.libs.tokenizer.template import continue_final_message

CHATS: list[list[dict[str, Any]]] = [
    [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "The colour is"}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Count to three."},
        {"role": "assistant", "content": "One, two,"},
    ],
    # Text the template writes again later: the cut is at its last place, inside the final message.
    [{"role": "user", "content": "Say: assistant"}, {"role": "assistant", "content": "assistant"}],
]


def _hf(source: str) -> PreTrainedTokenizerFast:
    tok = PreTrainedTokenizerFast(tokenizer_object=HfTokenizer(BPE()))
    tok.chat_template = source
    return tok


@pytest.mark.parametrize("chat", CHATS)
@pytest.mark.parametrize("which", ["smollm", "chatml", "gemma", "plain"])
def test_cut_is_where_hugging_face_cuts(which: str, chat: list[dict[str, Any]]) -> None:
    template = load_tokenizer().template if which == "smollm" else model_template(None, fallback=which)
    expected = _hf(template.source).apply_chat_template(
        chat, tokenize=False, add_generation_prompt=False, continue_final_message=True
    )
    got = render_continuing(template, chat)
    assert got == expected
    assert got.endswith(chat[-1]["content"])  # the prompt ends inside the answer's start


def test_trailing_space_the_template_trims_is_cut_after_the_text() -> None:
    trims = model_template("{% for m in messages %}[{{ m['content'] | trim }}]{% endfor %}")
    chat = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "The answer "}]
    assert render_continuing(trims, chat) == "[q][The answer"


def test_a_final_message_the_template_drops_is_refused() -> None:
    drops = model_template("{% for m in messages if m['role'] == 'user' %}{{ m['content'] }}{% endfor %}")
    with pytest.raises(TemplateError):
        render_continuing(drops, [{"role": "user", "content": "q"}, {"role": "assistant", "content": "hidden"}])
    with pytest.raises(TemplateError):
        continue_final_message("anything", "   ")
