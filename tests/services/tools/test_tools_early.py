"""The planner's embedding pass starts from context's early copy of the request (`subjects.EARLY`): the
stage then takes that pass for the clauses no rule matched instead of running its own; a request whose
clauses differ from the copy's runs its own; a raw completion starts none."""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np

from switchyard.libs.embeddings.batcher import PassBatcher
from switchyard.libs.tools import ToolContext, ToolPlanner
from switchyard.libs.tools.settings import ToolSettings
from switchyard.schemas import Work
from switchyard.services.tools.service import ToolsStage

TEXT = "Explain how a bicycle works. Notes: the bakery opens at seven and sells rye loaves"


def vector(clause: str) -> np.ndarray:
    """A row that tells clauses apart."""
    return np.frombuffer(clause.encode()[:16].ljust(16), dtype=np.uint8).astype(np.float32)


def stage(embedded: list[list[str]]) -> ToolsStage:
    def embed(clauses: list[str]) -> list[np.ndarray]:
        embedded.append(clauses)
        return [vector(c) for c in clauses]

    planner = ToolPlanner(ToolSettings())
    none: Any = None
    return ToolsStage(none, planner, none, none, none, PassBatcher(embed, name="planner-test"))


async def test_planning_takes_the_early_pass() -> None:
    embedded: list[list[str]] = []
    s = stage(embedded)
    w = Work(rid=uuid.uuid4().hex, tenant="t", user="u", key_id="k", text=TEXT)
    await s.start_early(w)
    clauses = s.planner.draft(TEXT, ToolContext(tenant="t", user="u", rid=w.rid)).unmatched
    assert clauses
    rows = await s._embed_for(w.rid)(clauses)
    assert len(rows) == len(clauses) and embedded == [clauses] and s.early.taken == 1


async def test_a_raw_completion_starts_no_pass() -> None:
    embedded: list[list[str]] = []
    s = stage(embedded)
    await s.start_early(Work(rid="r", tenant="t", user="u", key_id="k", text=TEXT, prompt_mode="raw"))
    assert s.early.started == 0 and embedded == []


async def test_clauses_that_differ_from_the_early_copy_get_their_own_pass() -> None:
    embedded: list[list[str]] = []
    s = stage(embedded)
    w = Work(rid=uuid.uuid4().hex, tenant="t", user="u", key_id="k", text="Explain how a kite flies.")
    await s.start_early(w)
    clauses = s.planner.draft("Explain how a glider flies.", ToolContext(tenant="t", user="u", rid=w.rid)).unmatched
    assert clauses and s.early.started == 1
    rows = await s._embed_for(w.rid)(clauses)
    assert s.early.taken == 0 and len(s.early) == 0  # the early pass is dropped, not kept for later
    assert [r.tolist() for r in rows] == [vector(c).tolist() for c in clauses]
    assert any(c in done for done in embedded for c in clauses)
