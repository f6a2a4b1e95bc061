"""A kernel build killed half-way never makes a later engine wait: torch's lock file it left is stale."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from switchyard import CHECKOUT
from switchyard.libs.engine import native

pytestmark = pytest.mark.skipif(not native.available(), reason=f"native kernels: {native.unavailable_reason()}")


def test_a_lock_left_by_a_killed_build_does_not_block_the_next_load(tmp_path):
    built = native.build_dir() / native._key()
    home = tmp_path / "home"
    copy = home / ".cache" / "switchyard" / "kernels" / built.name
    shutil.copytree(built, copy, ignore=shutil.ignore_patterns("lock", "build.flock"))
    (copy / "lock").touch()  # what torch's FileBaton leaves when its holder is killed
    code = "from switchyard.libs.engine import native; assert native.load(), native.unavailable_reason()"
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(CHECKOUT)}
    done = subprocess.run([sys.executable, "-c", code], env=env, timeout=240, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not (copy / "lock").exists()
