"""Abuse detection: count blocked and flagged requests per API key; past a threshold in a window,
suspend the key. Every gateway watches the standing bucket and answers a suspended key with 403;
an admin reinstates it, and only events after the reinstatement count again.

It reads the same `LOG` stream as the record writer, through its own durable consumer, so neither
can hold the other up, and a restart loses no count that matters (the window is re-read)."""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field

import structlog
from pydantic import BaseModel
from pydantic_settings import SettingsConfigDict

from libs.bus import Bus, ServiceSettings
from libs.bus.durable import DurableConsumer
from libs.bus.headers import now_ms
from libs.bus.kv import TypedKV
from schemas import KeyStanding, StageRecord, subjects

log = structlog.get_logger()


class AbuseSettings(ServiceSettings):
    model_config = ServiceSettings.model_config | SettingsConfigDict(env_prefix="SWITCHYARD_LOGGER_ABUSE_")

    enabled: bool = True
    # Blocked or flagged requests of one key within `window_s` that suspend it.
    threshold: int = 5
    window_s: float = 600.0
    durable: str = "abuse"


@dataclass
class _Pending:
    key_id: str | None = None
    action: str | None = None
    started_ms: int = 0


@dataclass
class _Window:
    events: deque[tuple[int, str]] = field(default_factory=deque)


class AbuseMonitor:
    def __init__(self, standing: TypedKV[KeyStanding], settings: AbuseSettings):
        self.standing = standing
        self.settings = settings
        # A request's key (gateway record) and verdict (safety_in record) arrive separately, in any order.
        self._pending: OrderedDict[str, _Pending] = OrderedDict()
        self._windows: dict[str, _Window] = {}

    async def on_record(self, _subject: str, rec: BaseModel) -> None:
        assert isinstance(rec, StageRecord)
        if rec.stage not in ("gateway", "safety_in"):
            return
        p = self._pending.setdefault(rec.rid, _Pending())
        if rec.stage == "gateway":
            p.key_id = (rec.decision.get("record") or {}).get("key_id")
        else:
            p.action = rec.decision.get("action")
            p.started_ms = rec.started_ms
        while len(self._pending) > 10_000:
            self._pending.popitem(last=False)
        if p.key_id is None or p.action is None:
            return
        del self._pending[rec.rid]
        if p.action in ("block", "flag"):
            await self._count(p.key_id, p.action, p.started_ms)

    async def _count(self, key_id: str, action: str, at_ms: int) -> None:
        current = await self.standing.get(key_id) or KeyStanding(key_id=key_id)
        if current.state == "suspended" or at_ms < current.since_ms:
            return  # already suspended, or an event from before an admin reinstated the key
        w = self._windows.setdefault(key_id, _Window())
        w.events.append((at_ms, action))
        horizon = now_ms() - int(self.settings.window_s * 1000)
        while w.events and (w.events[0][0] < horizon or w.events[0][0] < current.since_ms):
            w.events.popleft()
        blocked = sum(1 for _, a in w.events if a == "block")
        flagged = len(w.events) - blocked
        if len(w.events) >= self.settings.threshold:
            reason = (
                f"{blocked} blocked and {flagged} flagged requests within {self.settings.window_s:.0f}s "
                f"(threshold {self.settings.threshold})"
            )
            await self.standing.put(
                key_id,
                KeyStanding(
                    key_id=key_id, state="suspended", reason=reason, since_ms=now_ms(), blocked=blocked, flagged=flagged
                ),
            )
            self._windows.pop(key_id, None)
            log.warning("key suspended", key_id=key_id, reason=reason)
        else:
            await self.standing.put(key_id, current.model_copy(update={"blocked": blocked, "flagged": flagged}))


def _decode(_subject: str, data: bytes) -> BaseModel:
    return StageRecord.model_validate_json(data)


async def start_abuse_monitor(bus: Bus) -> DurableConsumer | None:
    settings = AbuseSettings()
    if not settings.enabled:
        return None
    standing = await bus.kv(subjects.STANDING_BUCKET, KeyStanding)
    monitor = AbuseMonitor(standing, settings)
    consumer = DurableConsumer(bus.js, subjects.LOG_STREAM, "log.*", settings.durable, _decode, monitor.on_record)
    await consumer.start()
    return consumer
