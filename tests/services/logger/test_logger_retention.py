"""Logger settings for privacy and retention, and the purge they drive."""

from __future__ import annotations

from pathlib import Path

import pytest

from switchyard.libs.store.db import make_engine
from switchyard.libs.store.records import RecordStore
from switchyard.libs.store.sql import now_ms
from switchyard.schemas import SafetyOutPart, StageRecord
from switchyard.services.logger.service import purge_once
from switchyard.services.logger.settings import LoggerSettings


def _rec(rid: str, started_ms: int, tenant: str = "acme") -> StageRecord:
    return StageRecord(
        rid=rid,
        stage="safety_out",
        tenant=tenant,
        started_ms=started_ms,
        duration_ms=1.0,
        part=SafetyOutPart(status="complete", output=f"answer {rid}"),
    )


def test_settings_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWITCHYARD_LOGGER_NO_RAW_TEXT_TENANTS", '["bank", "clinic"]')
    monkeypatch.setenv("SWITCHYARD_LOGGER_RETENTION_DAYS", "30")
    s = LoggerSettings()
    assert s.no_raw_text_tenants == ["bank", "clinic"] and s.retention_days == 30.0
    assert s.record_retention_days is None


async def test_purge_once_follows_the_settings(tmp_path: Path) -> None:
    settings = LoggerSettings(data_dir=str(tmp_path), retention_days=1, record_retention_days=10)
    store = RecordStore(make_engine(settings.db_url()))
    await store.init()
    day = 86_400_000
    await store.apply([_rec("fresh", now_ms()), _rec("old", now_ms() - 2 * day), _rec("ancient", now_ms() - 11 * day)])
    assert await purge_once(store, settings) == (2, 1)
    fresh, old = await store.get("fresh"), await store.get("old")
    assert fresh is not None and fresh[1]["output"] == "answer fresh"
    assert old is not None and old[1]["output"]["chars"] == len("answer old") and old[1]["status"] == "complete"
    assert await store.get("ancient") is None
    assert await purge_once(store, settings) == (0, 0)
    await store.engine.dispose()


async def test_export_pages_stay_under_the_message_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from switchyard.schemas import RequestListQuery
    from switchyard.services.logger import service

    monkeypatch.setattr(service, "EXPORT_PAGE_BYTES", 3000)
    store = RecordStore(make_engine(f"sqlite+aiosqlite:///{tmp_path / 'l.db'}"))
    await store.init()
    big = "x" * 1000
    for i in range(7):
        rec = _rec(f"r{i}", 1_000 + i)
        assert isinstance(rec.part, SafetyOutPart)
        rec.part.output = big
        await store.apply([rec])
    admin = service.Admin(store)
    seen: list[str] = []
    q = RequestListQuery(limit=50)
    pages = 0
    while True:
        page = await admin.export(q)
        pages += 1
        seen += [r["rid"] for r in page.items]
        if not page.next_cursor:
            break
        q = q.model_copy(update={"cursor": page.next_cursor})
    assert seen == [f"r{i}" for i in reversed(range(7))] and pages >= 3
    await store.engine.dispose()
