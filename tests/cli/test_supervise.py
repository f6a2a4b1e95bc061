"""The restart delay and the stop latch, without processes."""

from __future__ import annotations

import os
import signal
import threading

from switchyard.cli.supervise import Backoff, StopLatch, describe_exit


def test_delay_doubles_up_to_the_cap() -> None:
    b = Backoff(initial_s=0.5, factor=2, cap_s=30)
    assert [b.delay(n) for n in range(1, 9)] == [0.5, 1, 2, 4, 8, 16, 30, 30]


def test_a_long_enough_run_resets_the_backoff() -> None:
    b = Backoff(initial_s=0.5, reset_after_s=60)
    assert b.next_attempt(5, uptime_s=3) == 6
    assert b.next_attempt(5, uptime_s=60) == 1
    assert b.next_attempt(0, uptime_s=0) == 1


def test_latch_set_by_a_signal_handler_wakes_a_waiter() -> None:
    latch = StopLatch()
    assert not latch.wait(0)
    previous = signal.signal(signal.SIGUSR1, lambda *_: latch.set())
    try:
        woke = threading.Event()

        def waiter() -> None:
            if latch.wait(60):
                woke.set()

        t = threading.Thread(target=waiter)
        t.start()
        os.kill(os.getpid(), signal.SIGUSR1)
        t.join(60)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert woke.is_set()
    assert latch.wait(0) and latch.wait(None)  # stays set for every later waiter
    latch.set()  # setting twice is harmless


def test_exit_descriptions() -> None:
    assert describe_exit(-9) == "SIGKILL"
    assert describe_exit(0) == "exit 0"
    assert describe_exit(3) == "exit 3"
