"""Feedback is no existence oracle. A rating on another tenant's request id once answered 404 at once while
an unknown id waited for its record first: the difference told an attacker which ids exist. Now the
tenant is part of the one lookup, so both ids are the same miss: the same query, the same wait, the same
answer."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import event

from switchyard.cli.stack import Stack
from switchyard.libs.bus import BusError
from switchyard.libs.store.db import database_url, make_engine
from switchyard.libs.store.records import RecordStore
from switchyard.schemas import GatewayPart, LoggedRequest, RequestQuery, StageRecord
from switchyard.services.gateway.product import feedback
from switchyard.services.logger.service import Admin
from tests.e2e.conftest import admin_record, chat
from tests.security.conftest import assert_error


def _as_unknown(r: httpx.Response, rid: str) -> tuple[int, Any]:
    """Status and body with the rid the client sent written as a placeholder (the message repeats it)."""
    return r.status_code, r.json() | {
        "error": {**r.json()["error"], "message": r.json()["error"]["message"].replace(rid, "RID")}
    }


def _timed(c: httpx.Client, path: str, body: dict[str, Any]) -> tuple[httpx.Response, float]:
    t0 = time.monotonic()
    r = c.post(path, json=body)
    return r, time.monotonic() - t0


def test_another_tenants_rid_answers_as_an_unknown_one(
    stack: Stack, client: httpx.Client, attacker: httpx.Client
) -> None:
    evs, resp = chat(client, f"fb-{uuid.uuid4().hex[:8]}", "Say hi.", max_tokens=4)
    assert evs and evs[-1].event == "done"
    victims = resp.headers["x-request-id"]
    admin_record(stack, victims)  # logged: the rid exists
    unknown = uuid.uuid4().hex

    for path, field in (("/v1/feedback", "rid"), ("/v1/feedback/preference", "rid_a")):
        extra = {"rating": "up"} if field == "rid" else {"rid_b": uuid.uuid4().hex, "chosen": "a"}
        theirs, t_theirs = _timed(attacker, path, {field: victims, **extra})
        nothing, t_nothing = _timed(attacker, path, {field: unknown, **extra})
        assert_error(theirs, 404, "not_found")
        assert _as_unknown(theirs, victims) == _as_unknown(nothing, unknown)
        # Both waited out the record's wait: neither answered early (a lower bound; a slow machine passes).
        assert t_theirs >= feedback.RECORD_WAIT_S and t_nothing >= feedback.RECORD_WAIT_S, (t_theirs, t_nothing)

    # The owner's rating on the same rid is taken: the lookup finds a tenant's own request.
    r = client.post("/v1/feedback", json={"rid": victims, "rating": "up"})
    assert r.status_code == 202, r.text


@pytest.fixture
async def records(tmp_path: Path) -> Any:
    engine = make_engine(database_url(None, str(tmp_path), "logger"))
    store = RecordStore(engine)
    await store.init()
    yield store
    await engine.dispose()


async def test_one_query_with_the_tenant_for_both(records: RecordStore) -> None:
    """The logger's lookup for a tenant: one statement, the tenant in it, the same for both misses."""
    rid = uuid.uuid4().hex
    part = GatewayPart(api="chat", request=LoggedRequest(text="hi"))
    await records.apply(
        [StageRecord(rid=rid, stage="gateway", tenant="acme", started_ms=1, duration_ms=1.0, part=part)]
    )
    admin = Admin(records)
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    event.listen(records.engine.sync_engine, "before_cursor_execute", seen)
    try:
        answers = []
        for query in (RequestQuery(rid=rid, tenant="globex"), RequestQuery(rid=uuid.uuid4().hex, tenant="globex")):
            statements.clear()
            with pytest.raises(BusError) as got:
                await admin.get(query)
            answers.append((got.value.code, got.value.message.replace(query.rid, "RID"), list(statements)))
    finally:
        event.remove(records.engine.sync_engine, "before_cursor_execute", seen)
    (code_a, message_a, sql_a), (code_b, message_b, sql_b) = answers
    assert (code_a, message_a) == (code_b, message_b)
    assert sql_a == sql_b and len(sql_a) == 1 and "tenant" in sql_a[0], sql_a
    # The tenant's own lookup finds it.
    assert (await admin.get(RequestQuery(rid=rid, tenant="acme"))).rid == rid
