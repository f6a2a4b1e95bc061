"""Saved memory passes input safety's rules: an item is refused when it is saved, and one stored before
the rules caught it is left out of the prompt.

A memory item joins the system block of every later prompt of its user, so it is held to the rules a
user's message is held to (the tenant's request thresholds), and a hit that would only flag a message
refuses the item: memory is short, and nothing in it is worth a standing injection. Rules only, as for
files and tool output: no model to load, microseconds per item.
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from collections.abc import Sequence

from switchyard.libs.bus import BusError
from switchyard.libs.safety import InputGuard, Verdict
from switchyard.libs.safety.tenant import TenantGuards
from switchyard.schemas import ErrorCode, MemoryItem, TenantSafety


def refusal(verdicts: Sequence[Verdict]) -> BusError:
    names = ", ".join(sorted({v.category for v in verdicts}))
    return BusError(ErrorCode.policy_violation, f"memory item refused by input safety rules ({names})")


class MemoryRules:
    """The rules' verdicts on memory items, remembered per item and policy (an item's text never changes)."""

    def __init__(self, size: int = 4096):
        self.size = size
        self.guards = TenantGuards(InputGuard(use_embeddings=False))
        self._seen: OrderedDict[tuple[str, str], bool] = OrderedDict()

    def verdicts(self, text: str, safety: TenantSafety) -> list[Verdict]:
        return self.guards.for_tenant(safety).check(text, source="user")

    def check_new(self, text: str, safety: TenantSafety) -> None:
        """Raises `policy_violation` for an item the rules catch."""
        got = self.verdicts(text, safety)
        if got:
            raise refusal(got)

    async def usable(self, items: Sequence[MemoryItem], safety: TenantSafety) -> tuple[list[MemoryItem], list[str]]:
        """The items that may go into a prompt, and the ids of those withheld."""
        policy = json.dumps(safety.model_dump(mode="json")["thresholds"], sort_keys=True)
        todo = [m for m in items if (m.id, policy) not in self._seen]
        if todo:
            clean = await asyncio.to_thread(lambda: [not self.verdicts(m.text, safety) for m in todo])
            for m, ok in zip(todo, clean, strict=True):
                self._seen[(m.id, policy)] = ok
            while len(self._seen) > self.size:
                self._seen.popitem(last=False)
        kept = [m for m in items if self._seen.get((m.id, policy), True)]
        withheld = [m.id for m in items if not self._seen.get((m.id, policy), True)]
        return kept, withheld
