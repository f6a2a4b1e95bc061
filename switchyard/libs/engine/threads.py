"""How many intra-op threads an engine step gets: a fixed count, or the count its own step times favour.

A step on every core ("wide") beats one that leaves a core to the pipeline ("narrow") only while that
core is free: when another process holds it, the OpenMP team waits at every op for its descheduled
member and the step takes several times longer (docs/benchmarks.md, "Measurements behind the code's
choices" and "One stream ... wide steps"). Whether it is free changes with the box's load and the
pipeline's bursts, so `StepThreads` measures instead of guessing: it times decode steps per (thread
count, batch bucket), goes narrow once wide steps stop being faster (a run of slow ones: a lone slow
step is the pipeline's own burst), and probes wide again now and then, less often each time a probe
loses. A probe is skipped while more threads are runnable on the box
than it has cores (/proc/loadavg), where it would cost one step many times a narrow one's and lose.
Its clock is the step times it is fed, so with `box_busy` given it is deterministic.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field


def engine_threads(requested: int = 0) -> int:
    """Intra-op threads for a busy step loop: `requested` (EngineConfig.threads), else cores - 1.

    With another busy process on the cores, an OpenMP team waits at every op for a member the
    kernel has descheduled, while one thread degrades gracefully. So leave one core to the rest of
    the pipeline unless told otherwise.
    """
    if requested > 0:
        return requested
    return max(1, (os.cpu_count() or 2) - 1)


def step_threads(requested: int, batch: int, wide_batch: int) -> int:
    """The fixed policy: every core for a step of at most `wide_batch` sequences, else cores - 1.

    A small batch leaves the pipeline little to do per step (its work grows with the tokens a step
    makes), and the step thread runs niced, so what the pipeline does need preempts it. `requested`
    > 0 fixes the count whatever the batch.
    """
    if requested > 0:
        return requested
    if batch <= wide_batch:
        return os.cpu_count() or 1
    return engine_threads()


def runnable_exceeds_cores(cores: int | None = None) -> bool:
    """Whether more threads are runnable now than the box has cores (ours included); False where unknown."""
    try:
        with open("/proc/loadavg", "rb") as f:
            running = int(f.read().split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return False
    return running > (cores or os.cpu_count() or 1)


@dataclass
class _Bucket:
    """One batch bucket's estimates (EWMA seconds per decode step) and where its wide probing stands."""

    narrow: float | None = None
    wide: float | None = None
    mode: str = "narrow"  # 'narrow' | 'probe' (trying wide) | 'wide'
    since: int = 0  # narrow samples since the last probe
    interval: int = 0  # narrow samples between probes (doubles each time a probe loses)
    probe: list[float] = field(default_factory=list)
    slow: int = 0  # wide steps in a row slower than the bar (a probe's abort bar, or wide mode's)


class StepThreads:
    """Picks each step's intra-op thread count; the engine's step loop owns one and feeds it step times.

    `requested` > 0 fixes the count; otherwise a step of more than `wide_batch` sequences is narrow
    (cores - 1), and a smaller one is wide (every core) when `adaptive` is off, or as measured when
    it is on. Only decode steps (one token per sequence) are measured: a prefill chunk's time says
    nothing about the next decode step's.
    """

    def __init__(
        self,
        requested: int = 0,
        wide_batch: int = 0,
        adaptive: bool = True,
        cores: int | None = None,
        *,
        probe_steps: int = 8,
        first_probe_after: int = 8,
        reprobe_steps: int = 64,
        max_reprobe_steps: int = 4096,
        margin: float = 0.05,
        abort_ratio: float = 2.0,
        slow_run: int = 3,
        alpha: float = 0.25,
        box_busy: Callable[[], bool] | None = None,
    ) -> None:
        self.requested = requested
        self.wide_batch = wide_batch
        self.adaptive = adaptive
        cores = cores or os.cpu_count() or 1
        self.narrow = requested if requested > 0 else max(1, cores - 1)
        self.wide = requested if requested > 0 else cores
        self.probe_steps = probe_steps
        self.first_probe_after = first_probe_after
        self.reprobe_steps = reprobe_steps
        self.max_reprobe_steps = max_reprobe_steps
        self.margin = margin
        self.abort_ratio = abort_ratio
        # One slow step is usually the pipeline's burst (a sentence's classifier pass preempting a team
        # member), which a narrow step would have met too; another process holding a core slows every step.
        self.slow_run = slow_run
        self.alpha = alpha
        self.box_busy = box_busy or (lambda: runnable_exceeds_cores(cores))
        self._buckets: dict[int, _Bucket] = {}
        self.wide_steps = 0  # steps run wide (probes included), for the metrics

    @property
    def measuring(self) -> bool:
        return self.adaptive and self.wide > self.narrow and self.wide_batch > 0

    def initial(self) -> int:
        return self.narrow

    def choose(self, batch: int) -> int:
        if self.requested > 0:
            return self.requested
        if batch > self.wide_batch or self.wide == self.narrow:
            return self.narrow
        if not self.adaptive:
            return self.wide
        return self.wide if self._bucket(batch).mode != "narrow" else self.narrow

    def record(self, batch: int, threads: int, seconds: float, decode: bool = True) -> None:
        """A step of `batch` sequences ran on `threads` threads in `seconds`; `decode`: one token each."""
        if threads == self.wide and threads != self.narrow:
            self.wide_steps += 1
        if not self.measuring or batch > self.wide_batch or not decode:
            return
        b = self._bucket(batch)
        if threads == self.narrow:
            b.narrow = seconds if b.narrow is None else b.narrow + self.alpha * (seconds - b.narrow)
            if b.mode == "narrow":
                b.since += 1
                if b.since >= b.interval:
                    if self.box_busy():
                        b.since = 0  # another process holds a core: wide would only wait for it
                    else:
                        b.mode, b.probe = "probe", []
            return
        if threads != self.wide or b.narrow is None:
            return
        if b.mode == "probe":
            b.probe.append(seconds)
            b.slow = b.slow + 1 if seconds > b.narrow * self.abort_ratio else 0
            if b.slow >= self.slow_run:  # a team member descheduled step after step: give up now
                self._lose(b)
            elif len(b.probe) >= self.probe_steps:
                b.wide = statistics.median(b.probe)  # a lone burst in the probe does not decide it
                if b.wide < b.narrow * (1 - self.margin):
                    b.mode, b.interval, b.slow = "wide", self.reprobe_steps, 0
                else:
                    self._lose(b)
        elif b.mode == "wide":
            b.wide = seconds if b.wide is None else b.wide + self.alpha * (seconds - b.wide)
            b.slow = b.slow + 1 if seconds > b.narrow * (1 + self.margin) else 0
            # The narrow estimate is as old as the last probe; a busier box slows narrow steps too,
            # and after the switch they are measured afresh before wide is probed again.
            if b.slow >= self.slow_run:
                b.mode, b.since, b.interval, b.slow = "narrow", 0, self.reprobe_steps, 0

    def estimates(self, batch: int) -> tuple[float | None, float | None, str]:
        """(narrow, wide, mode) of `batch`'s bucket: seconds per decode step, for tests and logs."""
        b = self._bucket(batch)
        return b.narrow, b.wide, b.mode

    def _lose(self, b: _Bucket) -> None:
        b.wide = sum(b.probe) / len(b.probe)
        b.mode, b.since, b.slow = "narrow", 0, 0
        b.interval = min(self.max_reprobe_steps, max(self.reprobe_steps, b.interval * 2))

    def _bucket(self, batch: int) -> _Bucket:
        key = max(0, batch - 1).bit_length()  # 1 | 2 | 3-4 | 5-8 | ...
        b = self._buckets.get(key)
        if b is None:
            b = self._buckets[key] = _Bucket(interval=self.first_probe_after)
        return b
