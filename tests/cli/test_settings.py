"""The command reads its environment once, through `CliSettings`, and hands it down."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from switchyard.cli.__main__ import main as cli_main
from switchyard.cli.replay import admin_key
from switchyard.cli.settings import CliSettings
from switchyard.cli.stack import dev_key


def test_settings_read_the_documented_names(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SWITCHYARD_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("SWITCHYARD_PORT", "8123")
    monkeypatch.setenv("NATS_URL", "nats://10.0.0.1:4222")
    monkeypatch.setenv("SWITCHYARD_ADMIN_KEY", "sy-admin-from-env")
    monkeypatch.delenv("SWITCHYARD_URL", raising=False)
    s = CliSettings()
    assert (s.data_dir, s.port, s.nats_url, s.admin_key) == (
        tmp_path,
        8123,
        "nats://10.0.0.1:4222",
        "sy-admin-from-env",
    )
    assert s.gateway_url() == "http://127.0.0.1:8123"
    monkeypatch.setenv("SWITCHYARD_URL", "https://switchyard.example/")
    assert CliSettings().gateway_url() == "https://switchyard.example"


def test_keys_given_saved_or_new(tmp_path: Path) -> None:
    settings = CliSettings(data_dir=tmp_path, admin_key="")
    with pytest.raises(SystemExit, match="no admin key"):
        admin_key(None, settings)
    made = dev_key(tmp_path, "", "admin-api-key", "sy-admin")
    assert made.startswith("sy-admin-") and dev_key(tmp_path, "", "admin-api-key", "sy-admin") == made
    assert admin_key(None, settings) == made
    assert admin_key(None, settings.model_copy(update={"admin_key": "given"})) == "given"
    assert admin_key("flag", settings) == "flag"
    assert dev_key(tmp_path, "given", "admin-api-key", "sy-admin") == "given"


def test_status_looks_in_the_configured_data_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SWITCHYARD_DATA_DIR", str(tmp_path))
    assert cli_main(["status", "--json"]) == 1
    doc = {"pid": 1, "state": "ready", "services": {}}
    (tmp_path / "stack.json").write_text(json.dumps(doc))
    assert cli_main(["status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "ready"
