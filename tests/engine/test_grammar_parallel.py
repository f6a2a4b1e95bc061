"""Parallel tool calls under the tools grammar, with the real model: the grammar admits one call, then
more on their own lines and nothing else; without `parallel` it admits exactly one."""

from __future__ import annotations

import json

import pytest

from switchyard.libs.engine import Constraint, SamplingParams
from tests.engine.conftest import make_engine

WEATHER = {
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"]},
}
TIME = {"name": "get_time", "parameters": {"type": "object", "properties": {}}}
PROMPT = "What is the weather in Paris and in Oslo?"


@pytest.fixture(scope="module")
async def engine(fp32_model):
    eng = make_engine(fp32_model, block_size=16, num_blocks=128)
    await eng.start()
    yield eng
    await eng.stop()


async def _run(eng, rid: str, prompt: list[int], params: SamplingParams) -> tuple[str, str]:
    text, reason = "", ""
    async for c in eng.generate(rid, prompt, params):
        text += c.text
        if c.finished:
            reason = c.finish_reason or ""
    return text, reason


def _calls(text: str) -> list[dict]:
    assert text.startswith("<tool_call>") and text.endswith("</tool_call>"), text
    parts = text.removeprefix("<tool_call>").removesuffix("</tool_call>").split("</tool_call>\n<tool_call>")
    return [json.loads(p) for p in parts]


@pytest.mark.parametrize("parallel", [False, True])
async def test_the_tools_grammar_admits_one_call_or_several(engine, tokenizer, parallel: bool) -> None:
    chat = tokenizer.apply_chat_template([{"role": "user", "content": PROMPT}])
    prefix = "<tool_call>"
    spec = {"mode": "required", "tools": [WEATHER, TIME], "parallel": parallel}
    # ignore_eos: the model may not end the answer, so the grammar alone decides what follows a call.
    params = SamplingParams(
        max_tokens=120, ignore_eos=True, constraint=Constraint("tools", json.dumps(spec), prefix=prefix)
    )
    text, reason = await _run(engine, f"par-{parallel}", [*tokenizer.encode(chat), *tokenizer.encode(prefix)], params)
    if not parallel:
        # The grammar ends with the call: it stops there, max_tokens or not.
        assert reason == "stop" and len(_calls(prefix + text)) == 1
        return
    assert reason == "length"  # more calls, each on its own line, until the budget ran out
    whole = prefix + text
    complete = whole[: whole.rindex("</tool_call>") + len("</tool_call>")]
    calls = _calls(complete)
    assert len(calls) >= 2 and all(c["name"] in ("get_weather", "get_time") for c in calls)
    assert whole[len(complete) :].startswith("\n<tool_call>") or whole == complete
