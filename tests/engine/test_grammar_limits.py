"""Grammars bounded before they compile (issue 28, items 2, 3 and 7), with the real xgrammar, tokenizer
and model: each attack is refused by name before the compiler sees it; a compile that overruns its time
is refused and its worker replaced; compiled grammars keep to a byte budget and memory comes back;
other streams keep stepping while a grammar compiles."""

from __future__ import annotations

import asyncio
import json
import random
import string
import time

import pytest

from switchyard.libs.constraints import GrammarLimits
from switchyard.libs.engine import Constraint, SamplingParams
from switchyard.libs.engine.grammar import ConstraintError, Grammars
from tests.engine.conftest import make_engine

LIMITS = GrammarLimits.model_construct()


def _flat_ref_chain(n: int) -> str:
    defs: dict[str, object] = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(n)}
    defs[f"d{n}"] = {"type": "string"}
    return json.dumps({"$ref": "#/$defs/d0", "$defs": defs})


def _random_choices(seed: int, count: int, length: int) -> Constraint:
    """Distinct random literals: the costly kind of grammar to compile (each one its own token paths)."""
    rng = random.Random(seed)
    return Constraint(
        "choice", json.dumps(["".join(rng.choices(string.ascii_letters + " ", k=length)) for _ in range(count)])
    )


def _rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.fixture
def grammars(tokenizer, fp32_model):
    g = Grammars(tokenizer, fp32_model.cfg.vocab_size, LIMITS)
    yield g
    g.close()


@pytest.mark.parametrize(
    ("constraint", "limit"),
    [
        (Constraint("json_schema", _flat_ref_chain(4500)), "SWITCHYARD_GRAMMAR_MAX_SCHEMA_BYTES"),
        (Constraint("json_schema", _flat_ref_chain(300)), "SWITCHYARD_GRAMMAR_MAX_REF_DEPTH"),
        (Constraint("json_schema", json.dumps({"enum": list(range(10_000))})), "SWITCHYARD_GRAMMAR_MAX_ENUM_VALUES"),
        (Constraint("choice", json.dumps(["x" * 3000] * 256)), "SWITCHYARD_GRAMMAR_MAX_LITERAL_BYTES"),
        (Constraint("regex", "(" * 3000 + ")" * 3000), "SWITCHYARD_GRAMMAR_MAX_REGEX_CHARS"),
        (Constraint("regex", "(" * 1000 + ")" * 999), "SWITCHYARD_GRAMMAR_MAX_REGEX_DEPTH"),
        (Constraint("json_schema", '{"$ref": "#"}'), "circular \\$ref chain"),
        (
            Constraint(
                "tools", json.dumps({"mode": "required", "tools": [{"name": "f", "parameters": {"$ref": "#"}}]})
            ),
            "tools\\[0\\]\\.parameters: circular",
        ),
    ],
)
def test_each_attack_is_refused_before_the_compiler_sees_it(
    grammars: Grammars, constraint: Constraint, limit: str
) -> None:
    with pytest.raises(ConstraintError, match=limit):
        grammars.matcher(constraint)
    assert not grammars._worker.running and grammars.cached_bytes == 0


def test_a_constraint_xgrammar_refuses_is_a_constraint_error(grammars: Grammars) -> None:
    with pytest.raises(ConstraintError, match="invalid json_schema constraint"):
        grammars.matcher(Constraint("json_schema", '{"type": "nonsense"}'))
    assert grammars.matcher(Constraint("choice", '["yes", "no"]')).accept_string("yes")  # the worker serves on


def test_a_compile_over_its_time_is_refused_and_the_worker_replaced(tokenizer, fp32_model) -> None:
    roomy = LIMITS.model_copy(update={"max_literal_bytes": 1 << 20, "compile_timeout_s": 0.01})
    g = Grammars(tokenizer, fp32_model.cfg.vocab_size, roomy)
    try:
        t0 = time.monotonic()
        with pytest.raises(ConstraintError, match=r"over 0\.01s to compile .*SWITCHYARD_GRAMMAR_COMPILE_TIMEOUT_S"):
            g.matcher(_random_choices(1, 32, 3000))
        assert time.monotonic() - t0 < 60  # generous: startup, not the compile, is what takes time here
        assert not g._worker.running and g._worker.restarts == 1
        g._worker.timeout_s = 60.0
        assert g.matcher(Constraint("regex", "[0-9]+")).accept_string("42")  # a fresh worker compiles
    finally:
        g.close()


def test_compiled_grammars_keep_to_their_byte_budget_and_memory_comes_back(tokenizer, fp32_model) -> None:
    budget = 8 << 20
    g = Grammars(tokenizer, fp32_model.cfg.vocab_size, LIMITS.model_copy(update={"cache_bytes": budget}))
    try:
        g.matcher(_random_choices(0, 5, 3000))  # the worker and xgrammar's own state, before measuring
        g.clear()
        start = _rss_bytes()
        attack = [_random_choices(seed, 5, 3000) for seed in range(1, 17)]  # within the limits, distinct
        sizes = []
        for c in attack:
            g.matcher(c)
            sizes.append(g._compiled[Constraint(c.kind, c.spec)].memory_size_bytes)
            assert g.cached_bytes <= budget
        assert sum(sizes) > 2 * budget  # the attack set would not have fit: eviction happened
        assert len(g._compiled) < len(attack) and g.cached_bytes == sum(
            x.memory_size_bytes for x in g._compiled.values()
        )
        # Within 10 % of where it started, and within a few budgets in bytes: without eviction and the
        # heap handed back, sixteen grammars of ~4 MB (and their transient JSON) would each stay.
        grown = _rss_bytes() - start
        assert _rss_bytes() < start * 1.10 and grown < 4 * budget, (start, grown)
        g.clear()
        assert g.cached_bytes == 0 and _rss_bytes() < start * 1.10
    finally:
        g.close()


async def test_other_streams_step_while_a_grammar_compiles(fp32_model, tokenizer) -> None:
    roomy = LIMITS.model_copy(update={"max_literal_bytes": 1 << 20, "compile_timeout_s": 300.0})
    eng = make_engine(fp32_model, block_size=16, num_blocks=128, grammar_limits=roomy)
    await eng.start()
    try:
        prompt = tokenizer.encode("Count to a hundred:")
        warm = SamplingParams(max_tokens=1, constraint=Constraint("regex", "[a-z]+"))
        async for _ in eng.generate("warm", prompt, warm):  # the compile worker is up before we measure
            pass
        plain_chunks: list[float] = []
        started = asyncio.Event()

        async def plain() -> None:
            async for c in eng.generate("plain", prompt, SamplingParams(max_tokens=2000, ignore_eos=True)):
                plain_chunks.append(time.monotonic())
                started.set()
                if c.finished:
                    return

        plain_task = asyncio.create_task(plain())
        await asyncio.wait_for(started.wait(), 120)
        slow = SamplingParams(max_tokens=1, constraint=_random_choices(7, 24, 3000))
        asked = time.monotonic()
        first_at = None
        async for _ in eng.generate("slow", prompt, slow):
            first_at = first_at or time.monotonic()
        assert first_at is not None
        stepped = [t for t in plain_chunks if asked < t < first_at]
        # The compile (~0.5-2 s of CPU) never held the step loop: the other stream went on producing tokens.
        assert len(stepped) >= 3, (len(stepped), first_at - asked)
        eng.cancel("plain")
        await asyncio.wait_for(plain_task, 60)
    finally:
        await eng.stop()


def test_a_grammar_past_the_checks_costs_the_worker_not_the_engine(tokenizer, fp32_model) -> None:
    """Issue 28's 4,500-hop chain given to the compiler directly, as if the checks had missed it: it
    overflowed the engine's stack before; now it is the worker's to overrun (or crash), and a fresh
    worker compiles the next grammar."""
    g = Grammars(tokenizer, fp32_model.cfg.vocab_size, LIMITS.model_copy(update={"compile_timeout_s": 2.0}))
    try:
        with pytest.raises(ConstraintError, match=r"to compile|ended its compiler process"):
            g._worker.compile(Constraint("json_schema", _flat_ref_chain(4500)), "SWITCHYARD_GRAMMAR_COMPILE_TIMEOUT_S")
        assert g.matcher(Constraint("regex", "[0-9]+")).accept_string("7")
    finally:
        g.close()
