"""The abuse monitor against a real nats-server: only blocks are strikes (never flags), each tenant's\nstrike policy decides when they suspend a key, and a suspension names its requests."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest

from switchyard.libs.bus import Bus, NatsServer
from switchyard.libs.bus.headers import now_ms
from switchyard.libs.bus.kv import TypedKV
from switchyard.libs.telemetry import setup_tracing
from switchyard.schemas import (
    GatewayPart,
    KeyStanding,
    SafetyInPart,
    SafetyVerdict,
    StageRecord,
    StrikePolicy,
    subjects,
)
from switchyard.services.logger.abuse import start_abuse_monitor
from switchyard.services.logger.settings import LoggerSettings


@dataclass
class Monitor:
    bus: Bus
    standing: TypedKV[KeyStanding]
    latest: dict[str, KeyStanding] = field(default_factory=dict)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def on_change(self, key: str, value: KeyStanding | None) -> None:
        async with self.changed:
            if value is not None:
                self.latest[key] = value
            self.changed.notify_all()

    async def until(self, key_id: str, ok: Callable[[KeyStanding], bool]) -> KeyStanding:
        """The key's standing once it satisfies `ok` (each write to the bucket wakes the check)."""

        async def wait() -> KeyStanding:
            async with self.changed:
                await self.changed.wait_for(lambda: key_id in self.latest and ok(self.latest[key_id]))
                return self.latest[key_id]

        return await asyncio.wait_for(wait(), timeout=20)

    async def request(
        self,
        key_id: str,
        action: str,
        category: str = "S14",
        strikes: StrikePolicy | None = None,
        ago_ms: int = 0,
    ) -> str:
        """One request's records as the gateway and safety_in write them; its rid."""
        rid = uuid.uuid4().hex
        verdicts = (
            []
            if action == "allow"
            else [SafetyVerdict(category=category, score=0.6, action=action, classifier="c", version="1")]  # type: ignore[arg-type]
        )
        await self.bus.log_stage(
            StageRecord(
                rid=rid,
                stage="safety_in",
                started_ms=now_ms() - ago_ms,
                duration_ms=1,
                status="error" if action == "block" else "ok",
                decision={"action": action},
                part=SafetyInPart(safety_in=verdicts, safety_action=action, strikes=strikes or StrikePolicy()),
            )
        )
        await self.bus.log_stage(
            StageRecord(rid=rid, stage="gateway", started_ms=now_ms(), duration_ms=1, part=GatewayPart(key_id=key_id))
        )
        return rid


@pytest.fixture(scope="module")
async def monitor(nats_server: NatsServer) -> AsyncIterator[Monitor]:
    bus = await Bus.connect(nats_server.url, "logger", uuid.uuid4().hex[:6], setup_tracing("logger"))
    await bus.ensure_log_stream()
    consumer = await start_abuse_monitor(
        bus, LoggerSettings(abuse_threshold=5, abuse_window_s=600, abuse_durable=f"abuse-{uuid.uuid4().hex[:6]}")
    )
    assert consumer is not None
    standing = await bus.kv(subjects.STANDING_BUCKET, KeyStanding)
    m = Monitor(bus, standing)
    await standing.watch(m.on_change)
    yield m
    await consumer.stop()
    await bus.close()


def key() -> str:
    return "key-" + uuid.uuid4().hex[:8]


async def test_flags_alone_never_suspend_by_default(monitor: Monitor) -> None:
    k = key()
    flagged = [await monitor.request(k, "flag") for _ in range(8)]
    s = await monitor.until(k, lambda s: s.flagged == len(flagged))
    assert s.state == "active" and s.blocked == 0 and s.strikes == [] and s.reason == ""
    # Blocks still count, and the flags before them do not add to the count.
    blocked = [await monitor.request(k, "block") for _ in range(4)]
    s = await monitor.until(k, lambda s: s.blocked == 4)
    assert s.state == "active" and [x.rid for x in s.strikes] == blocked
    blocked.append(await monitor.request(k, "block"))
    s = await monitor.until(k, lambda s: s.state == "suspended")
    assert [x.rid for x in s.strikes] == blocked and {x.action for x in s.strikes} == {"block"}
    assert s.reason.startswith("5 blocked requests within 600s")


async def test_five_blocks_suspend_and_name_their_requests(monitor: Monitor) -> None:
    k = key()
    await monitor.request(k, "allow")
    await monitor.request("someone-else", "block")
    blocked = [await monitor.request(k, "block", category="S2") for _ in range(5)]
    s = await monitor.until(k, lambda s: s.state == "suspended")
    assert [x.rid for x in s.strikes] == blocked
    assert all(x.action == "block" and x.categories == ["S2"] and x.at_ms > 0 for x in s.strikes)
    assert s.blocked == 5 and s.flagged == 0 and "5 blocked requests" in s.reason
    assert monitor.latest.get("someone-else") is None or monitor.latest["someone-else"].state == "active"


async def test_a_tenants_threshold_and_window_decide(monitor: Monitor) -> None:
    k = key()
    policy = StrikePolicy(threshold=3, window_s=5)
    # Blocks older than the tenant's window (but inside the logger's default one) do not count.
    for _ in range(2):
        await monitor.request(k, "block", strikes=policy, ago_ms=60_000)
    recent = [await monitor.request(k, "block", strikes=policy)]
    s = await monitor.until(k, lambda s: s.strikes and s.strikes[-1].rid == recent[-1])
    assert s.state == "active" and [x.rid for x in s.strikes] == recent
    # Many flags in between never count.
    for _ in range(6):
        await monitor.request(k, "flag", strikes=policy)
    recent += [await monitor.request(k, "block", strikes=policy) for _ in range(2)]
    s = await monitor.until(k, lambda s: s.state == "suspended")
    assert [x.rid for x in s.strikes] == recent and s.reason == "3 blocked requests within 5s (threshold 3)"


async def test_a_tenant_may_turn_suspension_off(monitor: Monitor) -> None:
    k = key()
    off = StrikePolicy(enabled=False)
    blocked = [await monitor.request(k, "block", strikes=off) for _ in range(7)]
    s = await monitor.until(k, lambda s: s.blocked == 7)
    assert s.state == "active" and [x.rid for x in s.strikes] == blocked


async def test_only_strikes_after_reinstatement_count(monitor: Monitor) -> None:
    k = key()
    for _ in range(5):
        await monitor.request(k, "block")
    await monitor.until(k, lambda s: s.state == "suspended")
    await monitor.standing.put(k, KeyStanding(key_id=k, state="active", reason="reinstated", since_ms=now_ms()))
    await monitor.until(k, lambda s: s.state == "active")
    after = [await monitor.request(k, "block") for _ in range(4)]
    s = await monitor.until(k, lambda s: s.blocked == 4)
    assert s.state == "active" and [x.rid for x in s.strikes] == after
