"""Abuse detection: count strikes per API key; past a threshold in a window, suspend the key. Every
gateway watches the standing bucket and answers a suspended key with 403; an admin reinstates it,
and only events after the reinstatement count again.

A strike is a request input safety blocked: a rule hit, or a classifier score past its category's
calibrated block bar (docs/safety.md). A flag (a borderline score, work judged as work) is "worth a
look" and never a strike: one integration's key, used by many people, is not lost to borderline
scores on harmless text. Each tenant may set its own strike policy (`TenantSafety.strikes`: threshold,
window, or off); the logger's settings are the default. A suspension names the requests that caused
it (`KeyStanding.strikes`).

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
from switchyard.schemas import GatewayPart, KeyStanding, SafetyInPart, StageRecord, Strike, StrikePolicy, subjects
from switchyard.services.logger.settings import LoggerSettings

log = structlog.get_logger()


@dataclass
class _Pending:
    key_id: str | None = None
    action: str | None = None
    started_ms: int = 0
    policy: StrikePolicy = field(default_factory=StrikePolicy)
    categories: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Rule:
    """A strike policy with the logger's defaults filled in."""

    enabled: bool
    threshold: int
    window_s: float


def effective(policy: StrikePolicy, settings: LoggerSettings) -> Rule:
    return Rule(
        enabled=policy.enabled,
        threshold=policy.threshold if policy.threshold is not None else settings.abuse_threshold,
        window_s=policy.window_s if policy.window_s is not None else settings.abuse_window_s,
    )


def _categories(part: SafetyInPart | None) -> list[str]:
    verdicts = part.safety_in if part is not None else []
    return sorted({v.category for v in verdicts if v.action == "block"})


def _reason(blocked: int, rule: Rule) -> str:
    return f"{blocked} blocked requests within {rule.window_s:.0f}s (threshold {rule.threshold})"


class AbuseMonitor:
    def __init__(self, standing: TypedKV[KeyStanding], settings: LoggerSettings):
        self.standing = standing
        self.settings = settings
        # A request's key (gateway record) and verdict (safety_in record) arrive separately, in any order.
        self._pending: OrderedDict[str, _Pending] = OrderedDict()
        self._windows: dict[str, deque[Strike]] = {}

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
            p.policy = part.strikes if part is not None and part.strikes is not None else StrikePolicy()
            if p.action == "block":
                p.categories = _categories(part)
        while len(self._pending) > 10_000:
            self._pending.popitem(last=False)
        if p.key_id is None or p.action is None:
            return
        del self._pending[rec.rid]
        if p.action == "block":
            strike = Strike(rid=rec.rid, at_ms=p.started_ms, categories=p.categories)
            await self._count(p.key_id, strike, effective(p.policy, self.settings))
        elif p.action == "flag":
            await self._flagged(p.key_id)

    async def _flagged(self, key_id: str) -> None:
        """A flag is counted for the operator's view of the key, never towards a suspension."""
        current = await self.standing.get(key_id) or KeyStanding(key_id=key_id)
        if current.state == "active":
            await self.standing.put(key_id, current.model_copy(update={"flagged": current.flagged + 1}))

    async def _count(self, key_id: str, strike: Strike, rule: Rule) -> None:
        current = await self.standing.get(key_id) or KeyStanding(key_id=key_id)
        if current.state == "suspended" or strike.at_ms < current.since_ms:
            return  # already suspended, or an event from before an admin reinstated the key
        w = self._windows.setdefault(key_id, deque())
        w.append(strike)
        # The newest request's policy decides: an operator's change applies from the next block on.
        horizon = max(now_ms() - int(rule.window_s * 1000), current.since_ms)
        while w and w[0].at_ms < horizon:
            w.popleft()
        strikes = list(w)
        if rule.enabled and len(strikes) >= rule.threshold:
            reason = _reason(len(strikes), rule)
            await self.standing.put(
                key_id,
                KeyStanding(
                    key_id=key_id,
                    state="suspended",
                    reason=reason,
                    since_ms=now_ms(),
                    blocked=len(strikes),
                    flagged=current.flagged,
                    strikes=strikes,
                ),
            )
            self._windows.pop(key_id, None)
            log.warning("key suspended", key_id=key_id, reason=reason, rids=[s.rid for s in strikes])
        else:
            await self.standing.put(key_id, current.model_copy(update={"blocked": len(strikes), "strikes": strikes}))


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
