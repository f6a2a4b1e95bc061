"""Grammar-constrained decoding (xgrammar) with the real model: JSON schema, JSON object, regex,
choice and tool calls; a constrained sequence keeps batch invariance and replay exactness."""

from __future__ import annotations

import asyncio
import json
from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict

from switchyard.libs.engine import Constraint, SamplingParams
from switchyard.libs.engine.grammar import ConstraintError, Grammars
from tests.engine.conftest import make_engine
from tests.engine.helpers import drive, make_request


class Weather(BaseModel):
    model_config = ConfigDict(extra="forbid")
    city: Literal["Paris", "Oslo", "Lima"]
    days: int
    rain: bool


SCHEMA = json.dumps(Weather.model_json_schema())
WEATHER_TOOL = {
    "name": "get_weather",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["c", "f"]}},
        "required": ["city", "unit"],
    },
}


@pytest.fixture(scope="module")
async def engine(fp32_model):
    eng = make_engine(fp32_model, block_size=16, num_blocks=128)
    await eng.start()
    yield eng
    await eng.stop()


def _chat(tokenizer, text: str) -> list[int]:
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": text}])
    return tokenizer.encode(rendered)


async def _run(eng, rid: str, prompt: list[int], params: SamplingParams) -> tuple[str, str]:
    text, reason = "", ""
    async for c in eng.generate(rid, prompt, params):
        text += c.text
        if c.finished:
            reason = c.finish_reason or ""
    return text, reason


async def test_a_json_schema_answer_loads_and_validates(engine, tokenizer) -> None:
    prompt = _chat(tokenizer, "What is the weather in Paris for the next 3 days?")
    params = SamplingParams(max_tokens=40, constraint=Constraint("json_schema", SCHEMA))
    text, reason = await _run(engine, "js", prompt, params)
    assert reason == "stop", text  # the grammar ended the answer, not the token budget
    Weather.model_validate(json.loads(text))


async def test_json_object_regex_and_choice(engine, tokenizer) -> None:
    prompt = _chat(tokenizer, "Describe a cat.")
    obj, reason = await _run(engine, "jo", prompt, SamplingParams(max_tokens=60, constraint=Constraint("json_object")))
    if reason == "stop":
        assert isinstance(json.loads(obj), dict)
    else:  # out of tokens mid-object: still a prefix of one
        assert obj.startswith("{"), obj
    date, _ = await _run(
        engine, "rx", prompt, SamplingParams(max_tokens=12, constraint=Constraint("regex", r"20\d\d-[01]\d-[0-3]\d"))
    )
    assert len(date) == 10 and date[:2] == "20" and date[4] == date[7] == "-", date
    pick, _ = await _run(
        engine, "ch", prompt, SamplingParams(max_tokens=8, constraint=Constraint("choice", '["yes", "no", "maybe"]'))
    )
    assert pick in ("yes", "no", "maybe")


@pytest.mark.parametrize("mode", ["required", "named"])
async def test_a_forced_tool_call_has_arguments_that_validate(engine, tokenizer, mode: str) -> None:
    prompt = _chat(tokenizer, "What's the weather in Oslo?")
    spec = {"mode": "required", "tools": [WEATHER_TOOL, {"name": "get_time", "parameters": {}}]}
    prefix = "<tool_call>"
    if mode == "named":
        spec = {"mode": "required", "tools": [WEATHER_TOOL], "first": "city"}
        prefix = '<tool_call>{"name": "get_weather", "arguments": {"city": "'
    params = SamplingParams(max_tokens=80, constraint=Constraint("tools", json.dumps(spec), prefix=prefix))
    text, reason = await _run(engine, f"tool-{mode}", [*prompt, *tokenizer.encode(prefix)], params)
    assert reason == "stop", text
    call = json.loads((prefix + text).removeprefix("<tool_call>").removesuffix("</tool_call>"))
    assert call["name"] in ("get_weather", "get_time")
    if call["name"] == "get_weather":
        args = call["arguments"]
        assert set(args) == {"city", "unit"} and isinstance(args["city"], str) and len(args["city"]) <= 12
        assert args["unit"] in ("c", "f")


def test_constraints_keep_batch_invariance_and_replay(fp32_model, tokenizer) -> None:
    eng = make_engine(fp32_model, block_size=16, num_blocks=128)
    grammars = Grammars(tokenizer, fp32_model.cfg.vocab_size)
    prompt = _chat(tokenizer, "Weather in Lima?")

    def constrained(rid: str) -> object:
        r = make_request(
            rid, prompt, max_tokens=12, temperature=0.8, seed=5, constraint=Constraint("json_schema", SCHEMA)
        )
        r.grammar = grammars.matcher(r.params.constraint)
        return r

    eng._grammars = grammars
    alone = drive(eng, [constrained("a")])["a"]
    again = drive(eng, [constrained("a")])["a"]
    mates = drive(
        eng, [make_request("b", prompt[:9], max_tokens=12), constrained("a"), make_request("c", prompt, max_tokens=12)]
    )
    assert alone == again == mates["a"]
    assert tokenizer.decode(alone).startswith('{"city": "')


def test_a_bad_constraint_is_refused_by_name(tokenizer, fp32_model) -> None:
    grammars = Grammars(tokenizer, fp32_model.cfg.vocab_size)
    with pytest.raises(ConstraintError, match="json_schema"):
        grammars.matcher(Constraint("json_schema", '{"type": "nonsense"}'))
    with pytest.raises(ConstraintError, match="forced opening"):
        grammars.matcher(Constraint("regex", "[0-9]+", prefix="abc"))


async def test_a_bad_constraint_is_refused_before_any_chunk(engine, tokenizer) -> None:
    params = SamplingParams(max_tokens=4, constraint=Constraint("regex", "(unclosed"))
    with pytest.raises(ConstraintError, match="unclosed"):
        await asyncio.wait_for(_run(engine, "bad", _chat(tokenizer, "hi"), params), 60)


def test_a_sentencepiece_vocabulary_takes_its_own_grammar_kind() -> None:
    """Gemma's SentencePiece vocabulary (U+2581, <0xXX> byte tokens) goes to xgrammar as BYTE_FALLBACK:
    its tokens for a schema-valid answer are all accepted, and the answer's end with them."""
    import xgrammar as xgr

    from switchyard.libs.engine.grammar import tokenizer_info
    from switchyard.libs.tokenizer import load_tokenizer
    from tests.tokenizer.models import gemma3_path

    try:
        tok = load_tokenizer(gemma3_path())
    except FileNotFoundError as e:
        pytest.skip(str(e))
    compiled = xgr.GrammarCompiler(tokenizer_info(tok, tok.vocab_size)).compile_json_schema(SCHEMA)
    matcher = xgr.GrammarMatcher(compiled)
    answer = '{"city": "Oslo", "days": 3, "rain": true}'
    assert all(matcher.accept_token(i) for i in tok.encode(answer, add_bos=False))
    assert matcher.accept_token(tok.eos_token_id) and matcher.is_terminated()
    bad = xgr.GrammarMatcher(compiled)
    assert not all(bad.accept_token(i) for i in tok.encode('{"city": "Rome"', add_bos=False))
