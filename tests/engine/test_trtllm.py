"""The TensorRT-LLM adapter against a small fake of the documented LLM API."""

import asyncio
import sys
import types
from dataclasses import dataclass, field
from typing import Any

import pytest

from libs.engine import Constraint, EngineConfig, SamplingParams, create_engine


@dataclass
class FakeCompletion:
    index: int = 0
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    _last_token_ids_len: int = 0

    @property
    def token_ids_diff(self) -> list[int]:
        return self.token_ids[self._last_token_ids_len :]


class FakeRequestOutput:
    """Mimics tensorrt_llm's streaming RequestOutput: async-iterable, abortable."""

    def __init__(self, prompt: list[int], script: list[int], max_tokens: int) -> None:
        self.prompt_token_ids = prompt
        self.outputs = [FakeCompletion()]
        self.finished = False
        self.cached_tokens = 16
        self._script = script[:max_tokens]
        self._max = max_tokens
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True

    def __aiter__(self):
        return self._gen()

    async def _gen(self):
        comp = self.outputs[0]
        for tok in self._script:
            await asyncio.sleep(0)
            if self.aborted:
                self.finished = True
                comp.finish_reason = "cancelled"
                yield self
                return
            comp._last_token_ids_len = len(comp.token_ids)
            comp.token_ids.append(tok)
            if len(comp.token_ids) == self._max:
                self.finished = True
                comp.finish_reason = "length"
            yield self


class FakeLLM:
    instances: list["FakeLLM"] = []
    script: list[int] = []

    def __init__(self, model, kv_cache_config=None, **kwargs) -> None:
        self.model = model
        self.kv_cache_config = kv_cache_config
        self.kwargs = kwargs
        self.requests: list[FakeRequestOutput] = []
        self.params: list[FakeSamplingParams] = []
        FakeLLM.instances.append(self)

    def generate_async(self, inputs, sampling_params=None, streaming=False):
        assert streaming
        out = FakeRequestOutput(list(inputs), FakeLLM.script, sampling_params.max_tokens)
        self.params.append(sampling_params)
        self.requests.append(out)
        return out


@dataclass
class FakeSamplingParams:
    max_tokens: int = 32
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int | None = None
    seed: int | None = None
    stop: list[str] | None = None
    guided_decoding: Any = None


@dataclass
class FakeGuidedDecodingParams:
    json: str | None = None
    regex: str | None = None
    grammar: str | None = None
    json_object: bool = False


@dataclass
class FakeKvCacheConfig:
    enable_block_reuse: bool = True


@pytest.fixture
def fake_trt(monkeypatch, tokenizer):
    mod = types.ModuleType("tensorrt_llm")
    mod.LLM = FakeLLM
    mod.SamplingParams = FakeSamplingParams
    api = types.ModuleType("tensorrt_llm.llmapi")
    api.KvCacheConfig = FakeKvCacheConfig
    api.GuidedDecodingParams = FakeGuidedDecodingParams
    mod.llmapi = api
    monkeypatch.setitem(sys.modules, "tensorrt_llm", mod)
    monkeypatch.setitem(sys.modules, "tensorrt_llm.llmapi", api)
    FakeLLM.instances.clear()
    FakeLLM.script = tokenizer.encode("Hello there, friend. STOP here and more words follow")
    return mod


async def _collect(eng, rid, prompt, params):
    chunks = []
    async for c in eng.generate(rid, prompt, params):
        chunks.append(c)
        if c.finished:
            break
    return chunks


async def test_streams_usage_and_block_reuse(fake_trt):
    eng = create_engine(EngineConfig(kind="tensorrt_llm"))
    await eng.start()
    llm = FakeLLM.instances[0]
    assert llm.kv_cache_config.enable_block_reuse is True
    chunks = await _collect(eng, "t1", "<|im_start|>user\nhi<|im_end|>\n", SamplingParams(max_tokens=4))
    final = chunks[-1]
    assert final.finish_reason == "length"
    assert sum(len(c.token_ids) for c in chunks) == 4
    assert "".join(c.text for c in chunks) == "Hello there, friend"
    assert final.usage is not None and final.usage.cached_tokens == 16 and final.usage.completion_tokens == 4
    await eng.stop()


async def test_stop_string_does_not_leak_and_aborts(fake_trt):
    eng = create_engine(EngineConfig(kind="tensorrt_llm"))
    await eng.start()
    chunks = await _collect(eng, "t2", [1, 2, 3], SamplingParams(max_tokens=50, stop=["STOP"]))
    assert chunks[-1].finish_reason == "stop"
    assert "".join(c.text for c in chunks) == "Hello there, friend. "
    assert FakeLLM.instances[0].requests[0].aborted
    await eng.stop()


async def test_cancel(fake_trt):
    eng = create_engine(EngineConfig(kind="tensorrt_llm"))
    await eng.start()
    chunks = []
    async for c in eng.generate("t3", [1, 2, 3], SamplingParams(max_tokens=50)):
        chunks.append(c)
        if len(chunks) == 2:
            eng.cancel("t3")
        if c.finished:
            break
    assert chunks[-1].finish_reason == "cancelled"
    assert FakeLLM.instances[0].requests[0].aborted
    assert eng.metrics().running == 0
    await eng.stop()


async def test_response_formats_go_to_guided_decoding(fake_trt):
    eng = create_engine(EngineConfig(kind="tensorrt_llm"))
    await eng.start()
    assert FakeLLM.instances[-1].kwargs["guided_decoding_backend"] == "xgrammar"
    cases = [
        (Constraint("json_object"), FakeGuidedDecodingParams(json_object=True)),
        (Constraint("json_schema", '{"type": "object"}'), FakeGuidedDecodingParams(json='{"type": "object"}')),
        (Constraint("regex", "[0-9]+"), FakeGuidedDecodingParams(regex="[0-9]+")),
        (Constraint("choice", '["yes", "no"]'), FakeGuidedDecodingParams(grammar='root ::= "yes" | "no"')),
    ]
    for i, (c, want) in enumerate(cases):
        await _collect(eng, f"g{i}", "hi", SamplingParams(max_tokens=4, constraint=c))
        assert FakeLLM.instances[-1].params[-1].guided_decoding == want
    # A tool call's grammar starts inside the forced opening: only the opening applies here.
    await _collect(eng, "t", "hi", SamplingParams(max_tokens=4, constraint=Constraint("tools", "{}")))
    assert FakeLLM.instances[-1].params[-1].guided_decoding is None
    # What the LLM API cannot take is refused, not dropped.
    final = (await _collect(eng, "lb", "hi", SamplingParams(max_tokens=4, logit_bias={5: 1.0})))[-1]
    assert final.finish_reason == "error"
    await eng.stop()
