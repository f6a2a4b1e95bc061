from __future__ import annotations

import time
from pathlib import Path

import httpx

from switchyard.libs.bus import NatsServer
from switchyard.schemas import GatewayPart, StageRecord, subjects
from tests.services.gateway.harness import Gateway, Responder, gateway
from tests.services.gateway.sse_client import parse
from tests.wait import wait_for


async def test_chat_streams_frames_in_order(gw: Gateway, responder: Responder) -> None:
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.post("/chat", json={"chatId": "c1", "text": "hello"}, headers=gw.auth())
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    rid = r.headers["x-request-id"]
    assert len(rid) == 32
    # Frame format: id, event, data lines, blank line.
    assert r.text.startswith('id: 0\nevent: tool\ndata: {"id":"t1","name":"orders.lookup"')
    assert 'id: 2\nevent: delta\ndata: {"text":"Hel"}\n\n' in r.text
    events = parse(r.text)
    assert [e.event for e in events] == ["tool", "thinking", "delta", "delta", "done"]
    assert [e.id for e in events] == ["0", "1", "2", "3", "4"]
    assert events[0].data["status"] == "ok" and events[0].data["output"] == "shipped"
    assert events[1].data == {"text": "thinking..."}
    assert "".join(e.data["text"] for e in events if e.event == "delta") == "Hello"
    done = events[-1].data
    assert (done["prompt_tokens"], done["cached_tokens"], done["completion_tokens"]) == (42, 16, 3)
    assert done["finish_reason"] == "stop" and done["ttft_ms"] == 12.5

    work = next(w for w in responder.works if w.rid == rid)
    assert (work.tenant, work.user, work.api, work.chat_id, work.text) == ("acme", "ann", "chat", "c1", "hello")
    assert work.key_id.startswith("key_")
    assert work.sampling.temperature == 0.0 and work.sampling.seed is not None
    assert work.mode is None and work.created_ms > 0
    assert any(q.chat_id == "c1" and q.tenant == "acme" for q in responder.opened)


async def test_seed_kept_when_given_and_mode_from_model_suffix(gw: Gateway, responder: Responder) -> None:
    body = {"chatId": "c2", "text": "hello", "seed": 7, "model": "SmolLM2-135M-Instruct:reasoning", "temperature": 0.5}
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.post("/chat", json=body, headers=gw.auth())
    work = next(w for w in responder.works if w.rid == r.headers["x-request-id"])
    assert work.sampling.seed == 7 and work.sampling.temperature == 0.5
    assert (work.model, work.mode) == ("SmolLM2-135M-Instruct", "reasoning")


async def test_pipeline_error_is_an_error_event(gw: Gateway) -> None:
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.post("/chat", json={"chatId": "c1", "text": "midfail"}, headers=gw.auth())
    events = parse(r.text)
    assert [e.event for e in events] == ["delta", "error"]
    assert events[1].data == {
        "type": "content_blocked",
        "code": "content_blocked",
        "message": "stopped by output check",
    }


async def test_deadline_ends_the_stream(gw: Gateway, responder: Responder) -> None:
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        r = await c.post("/chat", json={"chatId": "c1", "text": "silent"}, headers=gw.auth())
    events = parse(r.text)
    assert [e.event for e in events] == ["error"]
    assert events[0].data["code"] == "deadline_exceeded"
    rid = r.headers["x-request-id"]
    await wait_for(lambda: any(c.rid == rid for c in responder.cancels))


async def test_disconnect_publishes_cancel(gw: Gateway, responder: Responder) -> None:
    async with httpx.AsyncClient(base_url=gw.url) as c:
        async with c.stream("POST", "/chat", json={"chatId": "c1", "text": "hang"}, headers=gw.auth()) as r:
            rid = r.headers["x-request-id"]
            async for line in r.aiter_lines():
                if line.startswith("data:"):
                    break  # got the first delta; now walk away
    t0 = time.monotonic()
    await wait_for(lambda: any(n.rid == rid for n in responder.cancels), 5)
    assert time.monotonic() - t0 < 3  # prompt: no waiting for the deadline or the next event
    notice = next(n for n in responder.cancels if n.rid == rid)
    assert notice.reason == "client_disconnected"


async def test_stop_endpoint_cancels_and_stream_ends_with_partial_text(gw: Gateway, responder: Responder) -> None:
    async with httpx.AsyncClient(base_url=gw.url) as c:
        async with c.stream("POST", "/chat", json={"chatId": "c1", "text": "hang"}, headers=gw.auth()) as r:
            rid = r.headers["x-request-id"]
            seen = []
            async for line in r.aiter_lines():
                seen.append(line)
                if line.startswith("data:") and len([s for s in seen if s.startswith("data:")]) == 1:
                    other = await c.post(f"/v1/streams/{rid}/cancel", headers=gw.auth(gw.free_key))
                    assert other.status_code == 202
        events = parse("\n".join(seen))
    assert [e.event for e in events] == ["delta", "done"]
    assert events[1].data["finish_reason"] == "cancelled"
    assert any(n.rid == rid and n.reason == "stopped" for n in responder.cancels)


async def test_resume_with_last_event_id(nats_server: NatsServer, responder: Responder, tmp_path: Path) -> None:
    async with gateway(nats_server, tmp_path, resume_grace_s=5.0) as g:
        _, key = await g.keys.create("acme", "pro")
        auth = g.auth(key)
        async with httpx.AsyncClient(base_url=g.url) as c:
            async with c.stream("POST", "/chat", json={"chatId": "c9", "text": "slow"}, headers=auth) as r:
                rid = r.headers["x-request-id"]
                got = []
                async for line in r.aiter_lines():
                    if line.startswith("id: "):
                        got.append(line)
                    if len(got) == 2:
                        break
            # Another tenant cannot attach to it.
            _, stranger = await g.keys.create("globex", "pro")
            assert (await c.get(f"/v1/streams/{rid}", headers=g.auth(stranger))).status_code == 404
            r2 = await c.get(f"/v1/streams/{rid}", headers={**auth, "Last-Event-ID": "1"})
        assert r2.status_code == 200
        events = parse(r2.text)
        assert [e.id for e in events] == ["2", "3", "4", "5", "6"]
        assert [e.event for e in events] == ["delta"] * 4 + ["done"]
        assert not any(n.rid == rid for n in responder.cancels)


async def test_conversations(gw: Gateway, responder: Responder) -> None:
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.get("/v1/conversations/c1", headers=gw.auth())
        assert r.status_code == 200
        assert r.json()["turns"][0]["answer"] == "Hello"
        r = await c.get("/v1/conversations/other-1", headers=gw.auth())
        assert r.status_code == 404
        assert r.json()["error"]["code"] == "not_found"
        n = len(responder.works)
        r = await c.post("/chat", json={"chatId": "other-1", "text": "hi"}, headers=gw.auth())
        assert r.status_code == 404
        assert r.json() == {
            "error": {"type": "not_found_error", "code": "not_found", "message": "conversation 'other-1' not found"}
        }
        assert r.headers["x-request-id"]
        assert len(responder.works) == n


async def test_admin_request_record(gw: Gateway) -> None:
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.get("/v1/admin/requests/abc", headers=gw.auth())
        assert r.status_code == 403
        assert r.json()["error"]["code"] == "forbidden"
        r = await c.get("/v1/admin/requests/abc", headers=gw.auth(gw.admin_key))
    assert r.status_code == 200
    body = r.json()
    assert body["rid"] == "abc" and len(body["spans"]) == 3
    roots = body["tree"]
    assert [n["name"] for n in roots] == ["POST /chat", "orphan"]
    assert [n["name"] for n in roots[0]["children"]] == ["ctx"]


async def test_readyz(gw: Gateway, responder: Responder) -> None:
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        r = await c.get("/readyz")
        assert r.status_code == 200
        body = r.json()
        assert body["status"] == "ready"
        assert set(body["stages"]) == set(subjects.STAGES) - {"gateway"}
        responder.healthy.discard("tools")
        try:
            r = await c.get("/readyz")
        finally:
            responder.healthy.add("tools")
        assert r.status_code == 503
        assert r.json()["missing"] == ["tools"]
        assert (await c.get("/healthz")).status_code == 200


async def test_models_and_metrics(gw: Gateway) -> None:
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.get("/v1/models", headers=gw.auth())
        assert r.json()["data"][0]["id"] == "SmolLM2-135M-Instruct" and r.json()["object"] == "list"
        await c.post("/chat", json={"chatId": "c1", "text": "hello"}, headers=gw.auth())
        text = (await c.get("/metrics")).text
    assert 'switchyard_gateway_requests_total{route="/chat",status="200"}' in text
    assert "switchyard_gateway_ttft_seconds_bucket" in text
    assert "switchyard_gateway_stream_duration_seconds" in text
    assert "switchyard_gateway_active_streams" in text
    assert "switchyard_gateway_rate_limited_total" in text or "switchyard_gateway_rate_limited" in text


async def test_stage_record_and_one_trace(gw: Gateway, responder: Responder) -> None:
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    async with httpx.AsyncClient(base_url=gw.url) as c:
        r = await c.post(
            "/chat",
            json={"chatId": "c7", "text": "hello", "seed": 11},
            headers={**gw.auth(), "traceparent": traceparent},
        )
    rid = r.headers["x-request-id"]
    # The pipeline's spans join the client's trace through the gateway's server span.
    assert responder.trace_ids[rid] == "0af7651916cd43dd8448eb211c80319c"

    async def logged() -> StageRecord | None:
        msg = await gw.bus.js.get_last_msg(subjects.LOG_STREAM, subjects.log_stage("gateway"))
        got = StageRecord.model_validate_json(msg.data or b"{}")
        return got if got.rid == rid else None

    record: StageRecord | None = await wait_for(logged, what=f"the gateway's stage record of {rid}")
    assert record is not None and record.rid == rid
    assert record.stage == "gateway" and record.tenant == "acme" and record.status == "ok"
    assert record.trace_id == "0af7651916cd43dd8448eb211c80319c"
    assert isinstance(record.part, GatewayPart)
    rec = record.part.model_dump(mode="json")
    assert rec["api"] == "chat" and rec["client_status"] == "complete" and rec["key_id"].startswith("key_")
    assert rec["request"]["text"] == "hello" and rec["request"]["chat_id"] == "c7"
    assert rec["request"]["sampling"]["seed"] == 11
    assert rec["gateway"]["usage"]["prompt_tokens"] == 42 and rec["gateway"]["finish_reason"] == "stop"


async def test_resume_and_stop_through_another_replica(
    nats_server: NatsServer, responder: Responder, tmp_path: Path
) -> None:
    """A client whose replica is gone reconnects to any other one; JetStream replays the stream."""
    async with (
        gateway(nats_server, tmp_path / "a", resume_grace_s=5.0) as a,
        gateway(nats_server, tmp_path / "b") as b,
    ):
        _, key = await a.keys.create("acme", "pro")
        _, key_b = await b.keys.create("acme", "pro")
        async with httpx.AsyncClient() as c:
            async with c.stream(
                "POST", f"{a.url}/chat", json={"chatId": "c9", "text": "slow"}, headers=a.auth(key)
            ) as r:
                rid = r.headers["x-request-id"]
                ids = []
                async for line in r.aiter_lines():
                    if line.startswith("id: "):
                        ids.append(line)
                    if len(ids) == 2:
                        break
            _, stranger = await b.keys.create("globex", "pro")
            assert (await c.get(f"{b.url}/v1/streams/{rid}", headers=b.auth(stranger))).status_code == 404
            assert (await c.get(f"{b.url}/v1/streams/nope", headers=b.auth(key_b))).status_code == 404
            r2 = await c.get(f"{b.url}/v1/streams/{rid}", headers={**b.auth(key_b), "Last-Event-ID": "1"})
            assert r2.status_code == 200
            events = parse(r2.text)
            assert [e.id for e in events] == ["2", "3", "4", "5", "6"]
            assert [e.event for e in events] == ["delta"] * 4 + ["done"]

            # Stop from replica B reaches the pipeline; the reader on replica A gets the final event.
            async with c.stream(
                "POST", f"{a.url}/chat", json={"chatId": "c9", "text": "hang"}, headers=a.auth(key)
            ) as r:
                rid = r.headers["x-request-id"]
                seen = []
                async for line in r.aiter_lines():
                    seen.append(line)
                    if line.startswith("data:") and sum(s.startswith("data:") for s in seen) == 1:
                        stop = await c.post(f"{b.url}/v1/streams/{rid}/cancel", headers=b.auth(key_b))
                        assert stop.status_code == 202
            assert [e.event for e in parse("\n".join(seen))] == ["delta", "done"]
            assert any(n.rid == rid and n.reason == "stopped" for n in responder.cancels)


async def test_in_process_with_asgi_transport(gw: Gateway) -> None:
    """create_app works without a server too (httpx.ASGITransport), as other suites may run it."""
    transport = httpx.ASGITransport(app=gw.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as c:
        r = await c.post("/chat", json={"chatId": "c1", "text": "hello"}, headers=gw.auth())
        assert r.status_code == 200 and r.headers["x-request-id"]
        assert [e.event for e in parse(r.text)] == ["tool", "thinking", "delta", "delta", "done"]
        r = await c.post("/chat", json={"chatId": "c1"}, headers=gw.auth())
        assert r.status_code == 400 and r.headers["x-request-id"]


async def test_keepalive_while_the_run_is_quiet(nats_server: NatsServer, responder: Responder, tmp_path: Path) -> None:
    """Each protocol's own keep-alive between events: a comment for /chat and OpenAI, Anthropic's ping event."""
    async with gateway(nats_server, tmp_path, keepalive_s=0.1) as g:
        _, key = await g.keys.create("acme", "pro")
        model = g.settings.models[0]
        async with httpx.AsyncClient(base_url=g.url, headers=g.auth(key)) as c:
            chat = await c.post("/chat", json={"chatId": "k1", "text": "slow"})
            openai = await c.post(
                "/v1/chat/completions",
                json={"model": model, "messages": [{"role": "user", "content": "slow"}], "stream": True},
            )
            anthropic = await c.post(
                "/v1/messages",
                json={
                    "model": model,
                    "max_tokens": 16,
                    "messages": [{"role": "user", "content": "slow"}],
                    "stream": True,
                },
            )
    assert "\n: keepalive\n\n" in chat.text and "\n: keepalive\n\n" in openai.text
    assert [e.event for e in parse(chat.text)] == ["delta"] * 6 + ["done"]
    assert parse(openai.text)[-1].data == "[DONE]"
    kinds = [e.event for e in parse(anthropic.text)]
    assert kinds[:2] == ["message_start", "ping"] and kinds.count("ping") > 1 and kinds[-1] == "message_stop"
