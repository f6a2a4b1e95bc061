"""Issue 28, item 4: one request cannot starve input safety. A 966 KB request (15 turns of a 5,000-word
line) once held safety_in 35 s while everyone else's requests failed; a 25k-message one did the same.
Both are 413 at the gateway now, in well under a second, are no strike against the key, and the
stack serves the next chat at once."""

from __future__ import annotations

import time

import httpx

from switchyard.cli.stack import Stack
from tests.security.conftest import assert_error, assert_healthy

MODEL = "SmolLM2-135M-Instruct"
LINE = " ".join(["lorem"] * 5000)  # a 5,000-word line, about 30,000 characters
PROSE = "The weather in the harbour town was mild, and the fishing boats came in early that day. "


def test_a_huge_history_is_413_at_the_gateway(
    client: httpx.Client, attacker: httpx.Client, attacker_key: tuple[str, str], stack: Stack
) -> None:
    turns = []
    for i in range(15):
        turns += [{"role": "user", "content": f"{i} {LINE}"}, {"role": "assistant", "content": "ok"}]
    turns.append({"role": "user", "content": "Summarise."})
    t0 = time.monotonic()
    r = attacker.post("/v1/chat/completions", json={"model": MODEL, "messages": turns, "max_tokens": 4})
    assert time.monotonic() - t0 < 10  # generous: the bound is the point (it was 35 s of everyone's time)
    assert_error(r, 413, "payload_too_large")
    assert "characters" in r.json()["error"]["message"]
    many = [{"role": "user", "content": "hi"}] * 25_000
    r = attacker.post("/v1/chat/completions", json={"model": MODEL, "messages": many, "max_tokens": 4})
    assert_error(r, 413, "payload_too_large")
    assert "messages" in r.json()["error"]["message"]
    # Refused for size, not judged: no strike against the attacker's key (other tests' keys may have some).
    admin = {"Authorization": f"Bearer {stack.admin_key}"}
    standing = httpx.get(f"{stack.url}/v1/admin/keys/standing", headers=admin).json()["data"]
    assert not [s for s in standing if s["key_id"] == attacker_key[0] and s.get("strikes")], standing
    assert_healthy(client)


def test_a_long_request_within_the_budget_is_served(client: httpx.Client) -> None:
    """Under the limits, a long history is judged (a window of it) and answered as before."""
    # (Prose: the classifier reads a long run of "lorem" as an injection attempt.)
    turns = [{"role": "user", "content": f"{i} {(PROSE * 250)[:20_000]}"} for i in range(6)]
    turns.append({"role": "user", "content": "Reply with one word."})
    r = client.post("/v1/chat/completions", json={"model": MODEL, "messages": turns, "max_tokens": 2})
    assert r.status_code == 200, r.text[:500]
    assert r.json()["choices"][0]["finish_reason"] in ("stop", "length")
