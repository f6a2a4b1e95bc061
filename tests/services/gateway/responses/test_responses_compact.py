"""`POST /v1/responses/compact` on the scripted pipeline: the model summarises the conversation, the user's
messages come back as they were with one compaction item, and that window sent back as input stands for the
turns it summarises."""

from __future__ import annotations

import httpx

from switchyard.services.gateway.responses import compaction
from switchyard.services.gateway.responses.models import CompactionObject
from tests.services.gateway.harness import Gateway, Responder
from tests.services.gateway.responses.test_responses_api import MODEL

CONVERSATION = [
    {"type": "message", "role": "user", "content": "We agreed to launch on Tuesday and notify support first."},
    {"type": "message", "role": "assistant", "content": "Understood: Tuesday, support first."},
]


async def test_compact_summarises_and_the_window_continues(gw: Gateway, responder: Responder) -> None:
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        r = await c.post(
            "/v1/responses/compact",
            json={"model": MODEL, "input": CONVERSATION, "prompt_cache_key": "k"},
            headers=gw.auth(),
        )
        assert r.status_code == 200, r.text
        window = CompactionObject.model_validate(r.json())
        assert window.object == "response.compaction" and window.id.startswith("resp_")
        user, item = window.output
        assert user.type == "message" and user.role == "user"
        assert user.content[0].text == CONVERSATION[0]["content"]
        assert item.type == "compaction" and window.usage.output_tokens == 3  # the summary run's own usage
        # The model was asked to summarise the whole conversation, and its answer is what the item carries.
        work = next(w for w in responder.works if w.rid == window.id.removeprefix("resp_"))
        assert work.system is None and not work.persist
        # The conversation is the run's history, as it was (never one text with role names in it).
        assert [(m.role, m.content) for m in work.messages] == [(m["role"], m["content"]) for m in CONVERSATION]
        assert work.text == compaction.SUMMARY_REQUEST
        assert compaction.decode(item.encrypted_content, "item") == "Hello"

        # A new response starts from the window: the summary is part of its instructions.
        nxt = await c.post(
            "/v1/responses",
            json={
                "model": MODEL,
                "store": False,
                "input": [*r.json()["output"], {"type": "message", "role": "user", "content": "When do we launch?"}],
            },
            headers=gw.auth(),
        )
        assert nxt.status_code == 200, nxt.text
        work = next(w for w in responder.works if w.rid == nxt.json()["id"].removeprefix("resp_"))
        assert work.system == f"{compaction.SUMMARY_HEADING}\nHello" and work.text == "When do we launch?"
        assert [m.content for m in work.messages] == [CONVERSATION[0]["content"]]


async def test_compact_refusals(gw: Gateway) -> None:
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        for body, status, named in (
            ({"input": CONVERSATION}, 400, "model"),
            ({"model": MODEL}, 400, "nothing to compact"),
            ({"model": MODEL, "input": "hi", "previous_response_id": "resp_" + "0" * 32}, 404, "not found"),
            ({"model": "nope", "input": "hi"}, 404, "does not exist"),
            ({"model": MODEL, "input": "hi", "reasoning": {"effort": "low"}}, 400, "'reasoning'"),
        ):
            r = await c.post("/v1/responses/compact", json=body, headers=gw.auth())
            assert r.status_code == status and named in r.json()["error"]["message"], (body, r.text)
        assert (await c.post("/v1/responses/compact", json={"model": MODEL, "input": "hi"})).status_code == 401
