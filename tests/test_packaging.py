"""The distribution installs one top-level package, `switchyard`: nothing named `libs` or `services`
lands in site-packages beside other projects' packages."""

from __future__ import annotations

import tomllib
from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_holds_one_top_level_package() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    found = config["tool"]["setuptools"]["packages"]["find"]
    packages = find_packages(str(ROOT), include=found["include"], exclude=found.get("exclude", ()))
    assert {p.split(".", 1)[0] for p in packages} == {"switchyard"}
    # Every service and library is in it (a folder without __init__.py would be silently left out).
    for part in ("schemas", "libs.engine", "libs.engine.native", "services.gateway", "services.inference", "cli"):
        assert f"switchyard.{part}" in packages
    assert config["project"]["scripts"]["switchyard"] == "switchyard.cli.__main__:main"
