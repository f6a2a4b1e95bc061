"""Abuse detection: count strikes per API key; past a threshold in a window, suspend the key. Every
gateway watches the standing bucket and answers a suspended key with 403; an admin reinstates it,
and only events after the reinstatement count again.

A strike is a request input safety blocked, or one it flagged where the tenant's policy makes a flag
a strike (`TenantSafety.flag_is_strike`, off by default). A flag means "worth a look": ordinary work
(code to run, a security question) gets flagged now and then, and a key that was never blocked must
not be suspended for it. A suspension names the requests that caused it (`KeyStanding.strikes`).

It reads the same `LOG` stream as the record writer, through its own durable consumer, so neither
can hold the other up, and a restart loses no count that matters (the window is re-read)."""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field

import structlog
from pydantic import BaseModel

from switchyard.libs.bus import Bus
from switchyard.libs.bus.durable import DurableConsumer
from switchyard.libs.bus.headers import now_ms
from switchyard.libs.bus.kv import TypedKV
from switchyard.schemas import GatewayPart, KeyStanding, SafetyInPart, StageRecord, Strike, subjects
from switchyard.services.logger.settings import LoggerSettings

log = structlog.get_logger()


@dataclass
class _Pending:
    key_id: str | None = None
    action: str | None = None
    started_ms: int = 0
    flag_is_strike: bool = False
    categories: list[str] = field(default_factory=list)


@dataclass
class _Event:
    strike: Strike
    counts: bool


@dataclass
class _Window:
    events: deque[_Event] = field(default_factory=deque)


def _categories(part: SafetyInPart | None, action: str) -> list[str]:
    verdicts = part.safety_in if part is not None else []
    return sorted({v.category for v in verdicts if v.action == action})


def _reason(blocked: int, flagged: int, settings: LoggerSettings) -> str:
    what = f"{blocked} blocked requests"
    if flagged:
        what = f"{blocked} blocked and {flagged} flagged requests (the tenant's policy counts flags)"
    return f"{what} within {settings.abuse_window_s:.0f}s (threshold {settings.abuse_threshold})"


class AbuseMonitor:
    def __init__(self, standing: TypedKV[KeyStanding], settings: LoggerSettings):
        self.standing = standing
        self.settings = settings
        # A request's key (gateway record) and verdict (safety_in record) arrive separately, in any order.
        self._pending: OrderedDict[str, _Pending] = OrderedDict()
        self._windows: dict[str, _Window] = {}

    async def on_record(self, _subject: str, rec: BaseModel) -> None:
        if not isinstance(rec, StageRecord) or rec.stage not in ("gateway", "safety_in"):
            return
        p = self._pending.setdefault(rec.rid, _Pending())
        if rec.stage == "gateway":
            p.key_id = rec.part.key_id if isinstance(rec.part, GatewayPart) else None
        else:
            part = rec.part if isinstance(rec.part, SafetyInPart) else None
            p.action = part.safety_action if part else None
            p.started_ms = rec.started_ms
            p.flag_is_strike = part is not None and part.flag_is_strike is True
            if p.action in ("block", "flag"):
                p.categories = _categories(part, p.action)
        while len(self._pending) > 10_000:
            self._pending.popitem(last=False)
        if p.key_id is None or p.action is None:
            return
        del self._pending[rec.rid]
        if p.action == "block" or p.action == "flag":
            strike = Strike(rid=rec.rid, action=p.action, at_ms=p.started_ms, categories=p.categories)
            await self._count(p.key_id, strike, counts=p.action == "block" or p.flag_is_strike)

    async def _count(self, key_id: str, strike: Strike, counts: bool) -> None:
        current = await self.standing.get(key_id) or KeyStanding(key_id=key_id)
        if current.state == "suspended" or strike.at_ms < current.since_ms:
            return  # already suspended, or an event from before an admin reinstated the key
        w = self._windows.setdefault(key_id, _Window())
        w.events.append(_Event(strike, counts))
        horizon = now_ms() - int(self.settings.abuse_window_s * 1000)
        while w.events and (w.events[0].strike.at_ms < horizon or w.events[0].strike.at_ms < current.since_ms):
            w.events.popleft()
        strikes = [e.strike for e in w.events if e.counts]
        blocked = sum(1 for e in w.events if e.strike.action == "block")
        flagged = len(w.events) - blocked
        if len(strikes) >= self.settings.abuse_threshold:
            reason = _reason(blocked, sum(1 for s in strikes if s.action == "flag"), self.settings)
            await self.standing.put(
                key_id,
                KeyStanding(
                    key_id=key_id,
                    state="suspended",
                    reason=reason,
                    since_ms=now_ms(),
                    blocked=blocked,
                    flagged=flagged,
                    strikes=strikes,
                ),
            )
            self._windows.pop(key_id, None)
            log.warning("key suspended", key_id=key_id, reason=reason, rids=[s.rid for s in strikes])
        else:
            await self.standing.put(
                key_id, current.model_copy(update={"blocked": blocked, "flagged": flagged, "strikes": strikes})
            )


class _Unread(BaseModel):
    """A `log.*` message the monitor has no use for (spans, feedback, other stages' records)."""


# A strike needs only these two records of a request; every other message is acked unread (a span batch
# or a whole inference record parsed for nothing was most of this consumer's cost).
_READ = frozenset({subjects.log_stage("gateway"), subjects.log_stage("safety_in")})


def _decode(subject: str, data: bytes) -> BaseModel:
    return StageRecord.model_validate_json(data) if subject in _READ else _Unread()


async def start_abuse_monitor(bus: Bus, settings: LoggerSettings) -> DurableConsumer | None:
    if not settings.abuse_enabled:
        return None
    standing = await bus.kv(subjects.STANDING_BUCKET, KeyStanding)
    monitor = AbuseMonitor(standing, settings)
    consumer = DurableConsumer(
        bus, subjects.LOG_STREAM, subjects.LOG_STAGES_ANY, settings.abuse_durable, _decode, monitor.on_record
    )
    await consumer.start()
    return consumer
