"""`/v1/admin/mcp-servers` at the gateway, with a real tools-side hub on the same bus and the SDK's own MCP
server: registration (listed at once, credentials masked), list, replace, delete; every bad input a 400
(or 404, 403) in the one error shape, refused before anything is stored."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from switchyard.libs.bus import NatsServer
from switchyard.libs.tools.mcp import McpHub
from switchyard.libs.tools.sandbox import Sandbox
from switchyard.libs.tools.settings import ToolSettings
from switchyard.services.tools.service import follow_mcp
from tests.services.gateway.harness import Gateway, connect
from tests.tools.mcp.servers import demo_http
from tests.wait import wait_for


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    with demo_http() as served:
        yield served


@pytest.fixture(scope="module")
async def hub(nats_server: NatsServer, gw: Gateway) -> AsyncIterator[McpHub]:
    bus = await connect(nats_server, "tools")
    settings = ToolSettings()
    h = McpHub(settings, Sandbox(settings))
    await follow_mcp(bus, h)
    yield h
    await h.close()
    await bus.drain()


@pytest.fixture
async def admin(gw: Gateway) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=gw.url, timeout=30, headers=gw.auth(gw.admin_key)) as c:
        yield c


def error(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    err: dict[str, Any] = r.json()["error"]
    assert set(err) >= {"type", "code", "message"}
    return err


async def test_only_the_admin_key_manages_mcp_servers(gw: Gateway) -> None:
    async with httpx.AsyncClient(base_url=gw.url, headers=gw.auth()) as c:
        assert error(await c.get("/v1/admin/mcp-servers"), 403)["code"] == "forbidden"
        body = {"name": "inv", "transport": "http", "url": "http://127.0.0.1:9/mcp"}
        assert error(await c.post("/v1/admin/mcp-servers", json=body), 403)["code"] == "forbidden"
        assert error(await c.delete("/v1/admin/mcp-servers/inv"), 403)["code"] == "forbidden"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"name": "Bad.Name", "transport": "http", "url": "http://h/mcp"}, "name"),
        ({"name": "inv__x", "transport": "http", "url": "http://h/mcp"}, "name"),
        ({"name": "inv", "transport": "http"}, "needs a url"),
        ({"name": "inv", "transport": "http", "url": "ftp://h/mcp"}, "http:// or https://"),
        ({"name": "inv", "transport": "stdio"}, "needs a command"),
        ({"name": "inv", "transport": "stdio", "command": ["x"], "url": "http://h"}, "for transport http"),
        ({"name": "inv", "transport": "http", "url": "http://h/mcp", "headers": {"A": "b\nc"}}, "line breaks"),
        ({"name": "inv", "transport": "http", "url": "http://h/mcp", "timeout_s": 0}, "timeout_s"),
        ({"name": "inv", "transport": "http", "url": "http://h/mcp", "max_result_bytes": 10**9}, "max_result_bytes"),
        ({"name": "inv", "transport": "http", "url": "http://h/mcp", "tenant": "x" * 200}, "tenant"),
        ({"name": "inv", "transport": "http", "url": "http://h/mcp", "surprise": 1}, "surprise"),
        ({"name": "inv", "transport": "websocket", "url": "ws://h"}, "transport"),
    ],
)
async def test_a_bad_registration_is_a_400_naming_what_is_wrong(
    admin: httpx.AsyncClient, body: dict[str, Any], says: str
) -> None:
    err = error(await admin.post("/v1/admin/mcp-servers", json=body), 400)
    assert err["code"] == "bad_request" and says in err["message"], err
    listed = (await admin.get("/v1/admin/mcp-servers")).json()["data"]
    assert not any(v["spec"]["name"] == body["name"] for v in listed)


async def test_bad_paths_and_queries_are_400_and_an_unknown_server_404(admin: httpx.AsyncClient) -> None:
    assert error(await admin.delete("/v1/admin/mcp-servers/Bad.Name"), 400)["code"] == "bad_request"
    assert error(await admin.get("/v1/admin/mcp-servers", params={"tenant": "x" * 200}), 400)["code"] == "bad_request"
    err = error(await admin.delete("/v1/admin/mcp-servers/nobody"), 404)
    assert err["code"] == "not_found" and "nobody" in err["message"]
    assert (
        error(
            await admin.post(
                "/v1/admin/mcp-servers", content=b"{not json", headers={"content-type": "application/json"}
            ),
            400,
        )["code"]
        == "bad_request"
    )


async def test_register_list_replace_and_remove(
    admin: httpx.AsyncClient, hub: McpHub, server: tuple[str, subprocess.Popen[bytes]]
) -> None:
    body = {"name": "inventory", "tenant": "acme", "transport": "http", "url": server[0], "headers": {"X-Token": "s3"}}
    r = await admin.post("/v1/admin/mcp-servers", json=body)
    assert r.status_code == 201, r.text
    view = r.json()
    assert view["state"] == "ready", view
    assert "inventory__lookup_stock" in {t["name"] for t in view["tools"]}
    assert view["skipped"] == ["unsafe.name"] and view["spec"]["headers"] == {"X-Token": "***"}
    listed = (await admin.get("/v1/admin/mcp-servers", params={"tenant": "acme"})).json()["data"]
    assert [v["key"] for v in listed] == [view["key"]]
    assert (await admin.get("/v1/admin/mcp-servers", params={"tenant": "globex"})).json()["data"] == []

    # An edit that sends the mask back keeps the stored credential.
    r = await admin.post("/v1/admin/mcp-servers", json={**body, "headers": {"X-Token": "***"}, "timeout_s": 4})
    assert r.status_code == 201 and r.json()["state"] == "ready" and r.json()["spec"]["timeout_s"] == 4
    assert hub.servers[view["key"]].spec.headers == {"X-Token": "s3"}

    # The same name and tenant again replaces it: disabled now, its tools gone from the tenant's list.
    r = await admin.post("/v1/admin/mcp-servers", json={**body, "enabled": False})
    assert r.status_code == 201 and r.json()["state"] == "disabled"
    assert r.json()["created_ms"] == view["created_ms"] and r.json()["updated_ms"] > view["updated_ms"]
    await wait_for(lambda: hub.specs("acme") == [], what="the hub to drop the disabled server's tools")

    gone = await admin.delete("/v1/admin/mcp-servers/inventory", params={"tenant": "acme"})
    assert gone.status_code == 200 and gone.json()["key"] == view["key"]
    assert (await admin.get("/v1/admin/mcp-servers")).json()["data"] == []
    assert error(await admin.delete("/v1/admin/mcp-servers/inventory", params={"tenant": "acme"}), 404)


async def test_a_server_that_cannot_be_reached_is_registered_with_its_error(
    admin: httpx.AsyncClient, hub: McpHub
) -> None:
    body = {"name": "down", "transport": "http", "url": "http://127.0.0.1:9/mcp", "timeout_s": 2}
    r = await admin.post("/v1/admin/mcp-servers", json=body)
    assert r.status_code == 201 and r.json()["state"] == "error" and r.json()["error"], r.text
    assert (await admin.delete("/v1/admin/mcp-servers/down")).status_code == 200
