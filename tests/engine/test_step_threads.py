"""The step loop's thread chooser: fed step times, it goes wide only while wide steps are faster."""

from switchyard.libs.engine.threads import StepThreads, runnable_exceeds_cores

NARROW_S, FAST_WIDE_S, SLOW_WIDE_S = 0.010, 0.007, 0.100


def chooser(**kw) -> StepThreads:
    opts = dict(wide_batch=4, cores=2, probe_steps=4, first_probe_after=3, reprobe_steps=10, box_busy=lambda: False)
    opts.update(kw)
    return StepThreads(**opts)  # type: ignore[arg-type]


def step(c: StepThreads, batch: int, wide_s: float, narrow_s: float = NARROW_S) -> int:
    """One step of `batch` sequences: the count the chooser picks, timed as the box would run it."""
    threads = c.choose(batch)
    c.record(batch, threads, wide_s if threads == 2 else narrow_s)
    return threads


def test_it_goes_wide_when_wide_steps_are_faster():
    c = chooser()
    picks = [step(c, 1, FAST_WIDE_S) for _ in range(20)]
    assert picks[:3] == [1, 1, 1]  # narrow first: its estimate is what a probe must beat
    assert picks[3:7] == [2, 2, 2, 2]  # the probe
    assert picks[7:] == [2] * 13 and c.estimates(1)[2] == "wide"
    assert c.wide_steps == 17


def test_it_stays_narrow_when_a_probe_loses_and_probes_less_often_each_time():
    c = chooser()
    picks = [step(c, 1, SLOW_WIDE_S) for _ in range(400)]
    wide_at = [i for i, t in enumerate(picks) if t == 2]
    # Three slow wide steps in a row end a probe; probes come after 3, then 10, 20, 40, ... narrow steps.
    assert wide_at[:6] == [3, 4, 5, 16, 17, 18]
    assert wide_at[6:12] == [39, 40, 41, 82, 83, 84]
    assert len(wide_at) == 18 and c.estimates(1)[2] == "narrow"


def test_a_wide_probe_that_is_not_faster_by_the_margin_loses():
    c = chooser()
    picks = [step(c, 1, NARROW_S * 0.98) for _ in range(13)]
    assert picks[3:7] == [2, 2, 2, 2] and picks[7:] == [1] * 6


def test_it_goes_narrow_at_once_when_the_box_gets_busy_and_probes_wide_again_later():
    c = chooser()
    for _ in range(10):
        step(c, 1, FAST_WIDE_S)
    assert c.choose(1) == 2
    # another process takes a core: every wide step is slow, and three in a row end wide steps ...
    assert [step(c, 1, SLOW_WIDE_S) for _ in range(3)] == [2, 2, 2]
    assert c.choose(1) == 1  # ... and the next step is narrow
    picks = [step(c, 1, FAST_WIDE_S) for _ in range(30)]  # the box is quiet again
    assert picks[:10] == [1] * 10 and picks[10:14] == [2] * 4 and picks[14:] == [2] * 16


def test_a_lone_slow_step_neither_ends_a_probe_nor_sends_wide_steps_narrow():
    # The pipeline's own burst (a sentence's classifier pass) preempts one wide step now and then.
    c = chooser()
    picks = [step(c, 1, SLOW_WIDE_S if i in (4, 12, 20) else FAST_WIDE_S) for i in range(30)]
    assert picks[3:] == [2] * 27 and c.estimates(1)[2] == "wide"


def test_it_does_not_probe_while_the_box_has_more_runnable_threads_than_cores():
    busy = [True]
    c = chooser(box_busy=lambda: busy[0])
    assert [step(c, 1, FAST_WIDE_S) for _ in range(30)] == [1] * 30
    busy[0] = False
    picks = [step(c, 1, FAST_WIDE_S) for _ in range(8)]
    assert picks[:3] == [1, 1, 1] and picks[3:] == [2] * 5


def test_the_box_load_reads_as_a_yes_or_no():
    assert runnable_exceeds_cores(cores=1 << 20) is False


def test_batches_are_measured_apart_and_large_ones_stay_narrow():
    c = chooser()
    for _ in range(10):
        step(c, 1, FAST_WIDE_S)
        step(c, 4, SLOW_WIDE_S)
    assert (c.choose(1), c.choose(3), c.choose(4), c.choose(5)) == (2, 1, 1, 1)


def test_prefill_steps_are_not_measured():
    c = chooser()
    for _ in range(10):
        c.record(1, c.choose(1), 0.5, decode=False)
    assert c.estimates(1) == (None, None, "narrow")


def test_overrides_fix_the_count():
    assert all(StepThreads(requested=3, wide_batch=4, cores=2).choose(b) == 3 for b in (1, 8))
    fixed_wide = StepThreads(wide_batch=1, adaptive=False, cores=2)
    for _ in range(50):
        fixed_wide.record(1, fixed_wide.choose(1), SLOW_WIDE_S)
    assert (fixed_wide.choose(1), fixed_wide.choose(2)) == (2, 1)
    assert StepThreads(wide_batch=0, cores=2).choose(1) == 1
    assert StepThreads(wide_batch=4, cores=1).choose(1) == 1
