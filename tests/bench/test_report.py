import os
import platform
import re
from pathlib import Path

from bench.report import machine


def test_machine_names_the_cpu_class_and_core_count() -> None:
    line = machine()
    assert line.startswith(f"{platform.machine()}, ")
    assert line.endswith(f", {os.cpu_count()} cores")
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        text = cpuinfo.read_text()
        model = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
        if model:
            assert model.group(1).strip() in line
        if re.search(r"^flags\s*:.*\bavx2\b", text, re.M):
            # Some vector extension is named, so two runs on different CPU classes read apart.
            assert re.search(r"\((amx_tile|avx512_bf16|avx512f|avx2)\)", line)
