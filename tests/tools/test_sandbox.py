"""Each hostile snippet must be stopped or contained, quickly, and leave the host able to run code."""

import contextlib
import os
import socket
import time
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from switchyard.libs.tools import ToolCall, ToolContext, ToolRunner, ToolSettings
from switchyard.libs.tools.base import ToolError
from switchyard.libs.tools.sandbox import CodeTool, Sandbox
from switchyard.libs.tools.settings import REPO_ROOT
from tests.wait import WaitTimeout, wait_for

CTX = ToolContext(tenant="default", user="dev", rid="r1")
TIGHT: dict[str, Any] = dict(
    sandbox_wall_s=2.0,
    sandbox_cpu_s=1,
    sandbox_memory_mb=256,
    sandbox_max_procs=8,
    sandbox_max_file_mb=1,
    sandbox_tmpfs_mb=4,
    sandbox_max_output_bytes=8192,
)


@pytest_asyncio.fixture(scope="module")
async def isolated() -> bool:
    return await Sandbox(ToolSettings()).isolation_available()


@pytest.fixture
def tool(isolated: bool) -> CodeTool:
    # Hostile snippets (fork bomb, writes to /etc) never run unisolated on the test host: as root,
    # rlimits alone would not contain them.
    if not isolated:
        pytest.skip("process isolation (namespaces) is unavailable here; hostile code is not run without it")
    return CodeTool(ToolSettings(**TIGHT))


def sandbox_procs_left() -> list[int]:
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if 200_000 <= os.stat(f"/proc/{pid}").st_uid < 300_000:
                left.append(int(pid))
        except FileNotFoundError:
            pass
    return left


async def sandbox_procs_gone(timeout_s: float = 10.0) -> list[int]:
    """The sandbox processes still alive once they have all gone or `timeout_s` has passed: a killed
    sandbox's processes leave /proc as the kernel reaps them, a moment after the tool returns."""
    with contextlib.suppress(WaitTimeout):
        await wait_for(lambda: not sandbox_procs_left(), timeout_s, "the sandbox processes to leave /proc", 0.02)
    return sandbox_procs_left()


async def assert_healthy(tool: CodeTool) -> None:
    out = await tool.run({"code": "print(17*23)"}, CTX)
    assert out.status == "ok" and out.data["stdout"].strip() == "391"


async def test_simple_snippet(tool: CodeTool, isolated: bool):
    out = await tool.run({"code": "import os\nprint(sum(range(10)), os.getcwd() != '/')"}, CTX)
    assert out.status == "ok"
    assert out.data["stdout"] == "45 True\n"
    assert out.data["isolated"] is isolated


async def test_fork_bomb_is_contained(tool: CodeTool):
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    t0 = time.monotonic()
    out = await tool.run({"code": bomb}, CTX)
    assert time.monotonic() - t0 < 6
    assert out.status in ("timeout", "error")
    assert await sandbox_procs_gone() == []
    await assert_healthy(tool)


async def test_infinite_loop_hits_cpu_limit(tool: CodeTool):
    t0 = time.monotonic()
    out = await tool.run({"code": "while True:\n    pass\n"}, CTX)
    assert time.monotonic() - t0 < 4
    assert out.status in ("error", "timeout")
    assert "limit" in out.output


async def test_one_gigabyte_allocation_fails(tool: CodeTool):
    out = await tool.run({"code": "x = bytearray(1024 ** 3)\nprint('allocated')"}, CTX)
    assert out.status == "error"
    assert "allocated" not in out.data["stdout"]
    assert "MemoryError" in out.data["stderr"]
    await assert_healthy(tool)


async def test_no_network(tool: CodeTool, isolated: bool):
    if not isolated:
        pytest.skip("no network namespace on this host")
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    code = (
        "import socket\n"
        "for host in ('127.0.0.1', '1.1.1.1'):\n"
        "    try:\n"
        f"        socket.create_connection((host, {port}), timeout=1)\n"
        "        print('connected', host)\n"
        "    except OSError as e:\n"
        "        print('blocked', host, type(e).__name__)\n"
    )
    out = await tool.run({"code": code}, CTX)
    assert "connected" not in out.data["stdout"]
    assert out.data["stdout"].count("blocked") == 2
    srv.setblocking(False)
    with pytest.raises(BlockingIOError):  # nothing reached the host's listener
        srv.accept()
    srv.close()


async def test_cannot_write_outside_its_folder(tool: CodeTool, tmp_path: Path):
    targets = [
        tmp_path / "escape.txt",
        REPO_ROOT / "escape.txt",
        Path("/etc/escape.txt"),
        Path("/escape.txt"),
        Path("/tmp/escape.txt"),
    ]
    code = (
        "import os\n"
        f"for p in {[str(t) for t in targets]!r} + ['../escape.txt']:\n"
        "    try:\n"
        "        with open(p, 'w') as f:\n"
        "            f.write('x')\n"
        "        print('wrote', p)\n"
        "    except OSError as e:\n"
        "        print('denied', p, type(e).__name__)\n"
        "open('inside.txt', 'w').write('fine')\n"
        "print('inside ok', open('inside.txt').read())\n"
    )
    out = await tool.run({"code": code}, CTX)
    assert "inside ok fine" in out.data["stdout"]
    for t in targets:
        assert not t.exists(), f"sandbox wrote {t}"


async def test_host_files_are_hidden(tool: CodeTool, isolated: bool):
    if not isolated:
        pytest.skip("no mount namespace on this host")
    secret = REPO_ROOT / "pyproject.toml"
    code = (
        f"try:\n    print(open({str(secret)!r}).read()[:20])\n"
        "except OSError as e:\n    print('hidden', type(e).__name__)\n"
    )
    out = await tool.run({"code": code}, CTX)
    assert out.data["stdout"].startswith("hidden")


async def test_big_file_is_limited(tool: CodeTool):
    code = "with open('big.bin', 'wb') as f:\n    f.write(b'x' * (20 * 1024 * 1024))\nprint('wrote it')\n"
    out = await tool.run({"code": code}, CTX)
    assert out.status == "error"
    assert "wrote it" not in out.data["stdout"]


async def test_ten_megabyte_print_is_capped(tool: CodeTool):
    t0 = time.monotonic()
    out = await tool.run({"code": "print('x' * 10_000_000)"}, CTX)
    assert time.monotonic() - t0 < 3
    assert out.data["truncated"] is True
    assert len(out.data["stdout"]) <= 8192
    assert "output exceeded" in out.output
    await assert_healthy(tool)


async def test_refuses_without_isolation_unless_allowed():
    sandbox = Sandbox(ToolSettings(**TIGHT))
    sandbox._isolation = False  # as on a host without namespaces
    with pytest.raises(ToolError, match="isolation"):
        await sandbox.run("print(1)")
    allowed = Sandbox(ToolSettings(**TIGHT, allow_unisolated_code=True))
    allowed._isolation = False
    out = await allowed.run("print(6*7)")
    assert out.stdout.strip() == "42" and out.isolated is False


async def test_runner_reports_code_results_and_refusals():
    runner = ToolRunner(ToolSettings(**TIGHT))
    [res] = await runner.run([ToolCall("c1", "code", {"code": "print(2**10)"})], CTX)
    if res.status == "error":  # host without namespaces
        assert "isolation" in res.output
    else:
        assert res.status == "ok" and "1024" in res.output


async def test_runner_timeout_kills_sandbox(isolated: bool):
    settings = ToolSettings(**{**TIGHT, "sandbox_wall_s": 10.0}, code_timeout_s=0.5, allow_unisolated_code=not isolated)
    runner = ToolRunner(settings)
    code = "import time\nwhile True:\n    time.sleep(0.05)\n"
    t0 = time.monotonic()
    [res] = await runner.run([ToolCall("c1", "code", {"code": code})], CTX)
    assert res.status == "timeout"
    assert time.monotonic() - t0 < 2
    assert await sandbox_procs_gone() == []
