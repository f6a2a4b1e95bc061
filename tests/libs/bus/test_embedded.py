"""The test-and-dev nats-server launcher picks no port itself: the server binds one and reports it."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from switchyard.libs.bus.embedded import start_nats_server


def test_the_server_reports_the_port_it_bound(tmp_path: Path) -> None:
    a = start_nats_server(store_dir=str(tmp_path / "a"))
    b = start_nats_server(store_dir=str(tmp_path / "b"))
    try:
        assert a.port != b.port
        for server in (a, b):
            with socket.create_connection(("127.0.0.1", server.port), timeout=2) as conn:
                greeting = conn.makefile("rb").readline()
            assert greeting.startswith(b"INFO ") and json.loads(greeting[5:])["port"] == server.port
    finally:
        a.stop()
        b.stop()
