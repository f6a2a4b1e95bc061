"""Live inference replicas, learned from heartbeats; the router's only state."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass

from switchyard.schemas import Heartbeat


@dataclass
class Replica:
    beat: Heartbeat
    seen: float  # monotonic seconds


class ReplicaTable:
    def __init__(self, ttl_s: float):
        self.ttl_s = ttl_s
        self._replicas: dict[str, Replica] = {}

    def observe(self, beat: Heartbeat) -> None:
        self._replicas[beat.replica] = Replica(beat, time.monotonic())

    def forget(self, replica: str) -> None:
        self._replicas.pop(replica, None)

    def live(self, model: str | None = None) -> list[Heartbeat]:
        now = time.monotonic()
        return [
            r.beat
            for r in self._replicas.values()
            if now - r.seen <= self.ttl_s and (model is None or r.beat.model == model)
        ]

    def is_live(self, replica: str) -> bool:
        r = self._replicas.get(replica)
        return r is not None and time.monotonic() - r.seen <= self.ttl_s


def sticky_key(tenant: str, chat_id: str | None, rid: str) -> str:
    """What a request is hashed by: its tenant's chat (chat ids are per tenant), or itself without one."""
    return f"{tenant}/{chat_id}" if chat_id else rid


def rendezvous(key: str, replicas: list[Heartbeat]) -> Heartbeat:
    """Highest-random-weight hashing: a conversation keeps its replica while that replica lives, and
    only the conversations of a replica that goes away move (its KV prefix cache is what we protect)."""

    def score(r: Heartbeat) -> int:
        return int.from_bytes(hashlib.blake2b(f"{key}|{r.replica}".encode(), digest_size=8).digest(), "big")

    return max(replicas, key=score)
