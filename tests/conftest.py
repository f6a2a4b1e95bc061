"""Session fixtures: a real nats-server on a free port for every test that needs the bus."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from libs.bus import NatsServer, start_nats_server


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    server = start_nats_server(store_dir=str(tmp_path_factory.mktemp("nats")))
    yield server
    server.stop()
