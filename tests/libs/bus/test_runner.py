"""A service outlives neither a signal nor its supervisor: killed with SIGKILL, `switchyard run` cannot stop
its children, so each one watches it and drains when it is gone."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

from switchyard import CHECKOUT
from switchyard.libs.bus.runner import stop_on_signals


async def test_the_supervisors_death_stops_the_service():
    supervisor = await asyncio.create_subprocess_exec(sys.executable, "-c", "import time; time.sleep(60)")
    stop = asyncio.Event()
    unwatch = stop_on_signals(stop, supervisor.pid)
    try:
        assert not stop.is_set()
        supervisor.kill()
        await asyncio.wait_for(stop.wait(), timeout=10)
    finally:
        unwatch()
        await supervisor.wait()


async def test_a_supervisor_already_gone_stops_it_at_once():
    gone = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
    await gone.wait()
    stop = asyncio.Event()
    stop_on_signals(stop, gone.pid)
    assert stop.is_set()


async def test_without_a_supervisor_only_a_signal_stops_it():
    stop = asyncio.Event()
    unwatch = stop_on_signals(stop)
    os.kill(os.getpid(), signal.SIGINT)
    await asyncio.wait_for(stop.wait(), timeout=10)
    unwatch()
    asyncio.get_running_loop().remove_signal_handler(signal.SIGINT)
    asyncio.get_running_loop().remove_signal_handler(signal.SIGTERM)


def test_a_router_whose_supervisor_is_killed_exits(nats_server):
    # A real service process under a real supervisor process that is then SIGKILLed.
    code = (
        "import os, subprocess, sys, time\n"
        "env = {**os.environ, 'SWITCHYARD_SUPERVISOR_PID': str(os.getpid())}\n"
        "p = subprocess.Popen([sys.executable, '-m', 'switchyard.services.router'], env=env)\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    env = {**os.environ, "NATS_URL": nats_server.url, "PYTHONPATH": str(CHECKOUT)}
    supervisor = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
    assert supervisor.stdout is not None
    child = int(supervisor.stdout.readline())
    supervisor.kill()
    supervisor.wait()
    try:
        os.waitpid(child, 0)  # not our child: this raises; its exit is seen below instead
    except ChildProcessError:
        pass
    for _ in range(1800):  # up to 180 s: a loaded machine starts a service slowly, and it watches once started
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        with open(f"/proc/{child}/stat") as fh:
            if fh.read().split(")")[1].split()[0] == "Z":
                return
        time.sleep(0.1)
    os.kill(child, signal.SIGKILL)
    raise AssertionError("the router outlived its supervisor")
