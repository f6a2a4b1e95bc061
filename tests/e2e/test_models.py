"""Several models side by side (issue 29): the session stack's SmolLM2 pool and a Gemma 3 270M pool of its
own, through the whole pipeline with the official OpenAI SDK: the model list, legacy text completions
(streamed and not, n, stop, echo, logprobs) against both, aliases, a chat to the base model refused, and a
configured fallback recorded in the request's record.

The Gemma pool runs the engine kind its registry entry names (switchyard/libs/models/registry.py): the native engine,
on Gemma's own GGUF, so its text is Gemma's (a greedy completion is llama.cpp's)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from switchyard.cli.health import wait_pools_live
from switchyard.cli.stack import Stack
from switchyard.libs.models import GEMMA_MODEL_NAME, ModelRegistry
from switchyard.libs.tokenizer.paths import DEFAULT_MODEL_NAME
from tests.e2e.conftest import admin_record

pytestmark = pytest.mark.e2e

GEMMA_POOL = ModelRegistry().get(GEMMA_MODEL_NAME).pool


def _check() -> None:
    return None


@pytest.fixture(scope="module")
def gemma(stack: Stack) -> Iterator[str]:
    """The Gemma pool: one inference process serving the registry's Gemma entry, as `switchyard run` starts it."""
    tag = f"inference-{GEMMA_POOL}"
    stack.start_service("inference", {**stack.service_env, "SWITCHYARD_INFERENCE_MODEL": GEMMA_MODEL_NAME}, GEMMA_POOL)
    assert stack.nats_url is not None
    try:
        wait_pools_live(stack.nats_url, {GEMMA_POOL}, 300, _check)
        yield GEMMA_MODEL_NAME
    finally:
        if tag in stack.procs:
            stack.stop_service(tag)


@pytest.fixture(scope="module")
def oai(stack: Stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.url}/v1", api_key=stack.api_key, max_retries=0, timeout=120)


def record(stack: Stack, rid: str) -> dict[str, Any]:
    rec = admin_record(stack, rid, lambda r: r["record"].get("status") == "complete" and "route" in r["record"])
    return dict(rec["record"])


def test_the_model_list_names_every_model_with_its_owner_context_and_capabilities(oai: openai.OpenAI) -> None:
    listed = {m.id: m.model_dump() for m in oai.models.list()}
    assert set(listed) >= {DEFAULT_MODEL_NAME, GEMMA_MODEL_NAME}, listed
    smol, gemma = listed[DEFAULT_MODEL_NAME], listed[GEMMA_MODEL_NAME]
    assert smol["owned_by"] == "HuggingFaceTB" and smol["context_length"] == 8192
    assert smol["capabilities"] == {"chat": True, "completion": True, "tools": True, "structured_outputs": True}
    assert gemma["owned_by"] == "google" and gemma["context_length"] == 8192
    assert gemma["capabilities"] == {"chat": False, "completion": True, "tools": False, "structured_outputs": False}
    # One model by its id, or by an alias (the canonical id comes back); an unknown one is 404.
    assert oai.models.retrieve("gemma3-270m").id == GEMMA_MODEL_NAME
    assert oai.models.retrieve("smollm2-135m-instruct").id == DEFAULT_MODEL_NAME
    with pytest.raises(openai.NotFoundError):
        oai.models.retrieve("gpt-4o")


def test_text_completions_on_smollm2_n_stop_logprobs_echo(oai: openai.OpenAI, stack: Stack) -> None:
    prompt = "The capital of France is"
    raw = oai.completions.with_raw_response.create(
        model="smollm2-135m-instruct", prompt=prompt, max_tokens=12, n=2, logprobs=3, temperature=0, seed=5
    )
    done = raw.parse()
    assert done.object == "text_completion" and done.model == DEFAULT_MODEL_NAME
    assert [c.index for c in done.choices] == [0, 1]
    # Greedy: both answers are the same text, and each spells its logprobs' tokens.
    assert done.choices[0].text == done.choices[1].text and done.choices[0].text.strip()
    lp = done.choices[0].logprobs
    assert lp is not None and "".join(lp.tokens or []) == done.choices[0].text
    assert len(lp.token_logprobs or []) == len(lp.tokens or []) == len(lp.text_offset or [])
    assert lp.text_offset and lp.text_offset[0] == 0
    assert all(len(top) <= 3 for top in lp.top_logprobs or [])
    assert done.usage is not None and done.usage.completion_tokens > 0 and done.usage.prompt_tokens > 0
    # The prompt went to the engine as it was: no chat template around it.
    rec = record(stack, raw.headers["x-request-id"])
    assert rec["prompt"] == prompt and rec["route"]["model"] == DEFAULT_MODEL_NAME, rec.get("route")
    assert rec["request"]["prompt_mode"] == "raw"
    # Replayed, a text completion stays one (its prompt verbatim) and reproduces token for token.
    admin = {"Authorization": f"Bearer {stack.admin_key}"}
    for mode in ("inference", "pipeline"):
        r = httpx.post(
            f"{stack.url}/v1/admin/replay/{raw.headers['x-request-id']}",
            json={"mode": mode},
            headers=admin,
            timeout=120,
        )
        assert r.status_code == 200 and r.json()["matched"], (mode, r.text[:800])
        if mode == "pipeline":  # context ran again, and passed the prompt verbatim again
            assert record(stack, r.json()["rid"])["prompt"] == prompt

    stopped = oai.completions.create(
        model=DEFAULT_MODEL_NAME, prompt="1, 2, 3, 4,", max_tokens=30, stop=[","], temperature=0
    )
    assert "," not in stopped.choices[0].text and stopped.choices[0].finish_reason == "stop", stopped

    echoed = oai.completions.create(model=DEFAULT_MODEL_NAME, prompt=prompt, max_tokens=4, echo=True)
    assert echoed.choices[0].text.startswith(prompt) and len(echoed.choices[0].text) > len(prompt)


@pytest.mark.parametrize("model", [DEFAULT_MODEL_NAME, GEMMA_MODEL_NAME])
def test_streamed_text_completions(oai: openai.OpenAI, gemma: str, model: str) -> None:
    chunks = list(
        oai.completions.create(
            model=model,
            prompt=["Once upon a time", "The sea is"],
            max_tokens=8,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    texts: dict[int, str] = {0: "", 1: ""}
    finishes: dict[int, str] = {}
    for c in chunks:
        assert c.object == "text_completion"
        for ch in c.choices:
            texts[ch.index] += ch.text
            if ch.finish_reason:
                finishes[ch.index] = ch.finish_reason
    assert all(t.strip() for t in texts.values()), texts
    assert set(finishes) == {0, 1}
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens > 0 and usage.prompt_tokens > 0


def test_text_completions_on_gemma(oai: openai.OpenAI, stack: Stack, gemma: str) -> None:
    raw = oai.completions.with_raw_response.create(
        model="gemma3-270m", prompt="Write a sentence.", max_tokens=40, n=2, stop=["."], logprobs=1
    )
    done = raw.parse()
    assert done.model == GEMMA_MODEL_NAME and len(done.choices) == 2
    for c in done.choices:
        assert c.text and "." not in c.text and c.finish_reason == "stop", c
        assert c.logprobs is not None and len(c.logprobs.tokens or []) > 0
    rec = record(stack, raw.headers["x-request-id"])
    assert (rec["route"]["model"], rec["route"]["pool"], rec["model"]) == (
        GEMMA_MODEL_NAME,
        GEMMA_POOL,
        GEMMA_MODEL_NAME,
    )

    # Gemma's own text: greedy, the native engine continues as llama.cpp does on the same file.
    greedy = oai.completions.create(model=gemma, prompt="The capital of France is", max_tokens=7, temperature=0)
    assert greedy.choices[0].text == " the capital of the country of France", greedy

    echoed = oai.completions.create(model=gemma, prompt="Hello", max_tokens=3, echo=True)
    assert echoed.choices[0].text.startswith("Hello")
    # The pool's own /metrics name its model (vLLM's `model_name` label).
    port = stack.replica_metrics_ports[f"inference-{GEMMA_POOL}"]
    scraped = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    lines = [ln for ln in scraped.splitlines() if ln.startswith("vllm:generation_tokens_total{")]
    assert lines and all(f'model_name="{GEMMA_MODEL_NAME}"' in ln for ln in lines), lines


def test_a_chat_to_the_base_model_is_a_clear_400(oai: openai.OpenAI, stack: Stack, gemma: str) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model="gemma3-270m", messages=[{"role": "user", "content": "Hi"}])
    assert "no chat template" in str(e.value) and "/v1/completions" in str(e.value)
    with pytest.raises(anthropic.BadRequestError) as a:
        anthropic.Anthropic(base_url=stack.url, api_key=stack.api_key, max_retries=0).messages.create(
            model=gemma, max_tokens=8, messages=[{"role": "user", "content": "Hi"}]
        )
    assert "no chat template" in str(a.value)
    # The chat model still chats, by its alias too.
    answer = oai.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "Say hi."}], max_tokens=8
    )
    assert answer.model == DEFAULT_MODEL_NAME and answer.choices[0].message.content


def test_refused_text_completion_parameters(client: httpx.Client) -> None:
    for body, says in (
        ({"prompt": [[1, 2, 3]]}, "token ids"),
        ({"prompt": [1, 2, 3]}, "token ids"),
        ({"prompt": "x", "suffix": "y"}, "suffix"),
        ({"prompt": "x", "echo": True, "logprobs": 1}, "echo with logprobs"),
        ({"prompt": "x", "best_of": 2}, "best_of"),
        ({"prompt": "x", "n": 9}, "n"),
    ):
        r = client.post("/v1/completions", json={"model": DEFAULT_MODEL_NAME, **body})
        assert r.status_code == 400 and says in r.json()["error"]["message"], (body, r.text)
    r = client.post("/v1/completions", json={"model": "gpt-4o", "prompt": "x"})
    assert r.status_code == 404, r.text


def test_a_configured_fallback_takes_the_request_and_the_record_says_so(
    oai: openai.OpenAI, stack: Stack, gemma: str
) -> None:
    """The operator names SmolLM2 as Gemma's fallback; with no Gemma replica live, a Gemma request is
    answered by SmolLM2 and its record names both. Without that setting, the same request fails."""
    stack.restart_service("router", {"SWITCHYARD_MODEL_FALLBACKS": json.dumps({GEMMA_MODEL_NAME: DEFAULT_MODEL_NAME})})
    stack.stop_service(f"inference-{GEMMA_POOL}")
    try:
        stack.wait_ready(120)
        raw = oai.completions.with_raw_response.create(model=GEMMA_MODEL_NAME, prompt="Tea or coffee?", max_tokens=6)
        done = raw.parse()
        assert done.model == DEFAULT_MODEL_NAME and done.choices[0].text, done
        route = record(stack, raw.headers["x-request-id"])["route"]
        assert route["model"] == DEFAULT_MODEL_NAME and route["fallback_from"] == GEMMA_MODEL_NAME, route
        assert f"no replica of {GEMMA_MODEL_NAME} is live" in route["reason"], route
    finally:
        stack.restart_service("router")
        stack.wait_ready(120)
    with pytest.raises(openai.APIStatusError) as e:
        oai.completions.create(model=GEMMA_MODEL_NAME, prompt="Tea or coffee?", max_tokens=6)
    assert e.value.status_code == 503, e.value
