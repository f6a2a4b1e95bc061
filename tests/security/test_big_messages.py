"""Item 6 of issue 28: an answer whose last message is over NATS's max payload still arrives, whole.

A 1,000-token answer with 20 alternatives a token carries about 1.3 MB of log probabilities in the
message that ends its stream (inference → safety_out) and in its `done` event (safety_out → gateway):
both went over the server's 1 MiB and the answer was lost (503 after every token was made). They now
travel as parts (switchyard/libs/bus/parts.py). One answer is enough to cross the limit; `n` only multiplies it.
"""

from __future__ import annotations

import httpx

from tests.security.conftest import assert_healthy

MODEL = "SmolLM2-135M-Instruct"


def test_a_long_answer_with_top_logprobs_arrives_whole(client: httpx.Client) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Tell me a long story about a lighthouse keeper."}],
        "max_tokens": 1000,
        "ignore_eos": True,
        "logprobs": True,
        "top_logprobs": 20,
    }
    r = client.post("/v1/chat/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text[:500]
    choice = r.json()["choices"][0]
    content = choice["logprobs"]["content"]
    assert len(content) == r.json()["usage"]["completion_tokens"] == 1000
    assert all(len(c["top_logprobs"]) == 20 for c in content)
    assert len(r.content) > 1 << 20  # the answer really was over one NATS message
    assert_healthy(client)
