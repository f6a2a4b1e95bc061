import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from switchyard.libs.tools import ToolCall, ToolContext, ToolRunner, ToolSettings
from switchyard.libs.tools.web import LocalIndexProvider, WebTool
from tests.http_server import serve_http

CTX = ToolContext(tenant="default", user="dev", rid="r1")


async def test_local_index_finds_page_and_relevant_snippet():
    tool = WebTool(ToolSettings())
    out = await tool.run({"query": "boiling point of water at altitude"}, CTX)
    assert out.sources[0] == "https://en.wikipedia.org/wiki/Boiling_point"
    assert "altitude" in out.data["results"][0]["snippet"]
    assert len(out.sources) <= 3


async def test_local_index_no_results():
    out = await WebTool(ToolSettings()).run({"query": "qqqzzz"}, CTX)
    assert out.data == {"results": []}


async def test_missing_index_file_gives_no_results(tmp_path):
    provider = LocalIndexProvider(tmp_path / "none.jsonl")
    assert await provider.search("anything", 3) == []


class FakeSearx(BaseHTTPRequestHandler):
    queries: list[dict[str, list[str]]] = []

    def do_GET(self) -> None:
        qs = parse_qs(urlparse(self.path).query)
        FakeSearx.queries.append(qs)
        if qs.get("q") == ["explode"]:
            self.send_response(500)
            self.end_headers()
            return
        body: dict[str, Any] = {
            "query": qs["q"][0],
            "results": [
                {
                    "url": f"https://example.org/{i}",
                    "title": f"Result {i}",
                    "content": f"About {qs['q'][0]} {i}",
                }
                for i in range(5)
            ]
            + [{"title": "no url"}],
        }
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def searx() -> Iterator[str]:
    with serve_http(FakeSearx) as url:
        yield url + "/search"


async def test_http_provider_against_local_server(searx: str):
    runner = ToolRunner(ToolSettings(web_provider="http", web_url=searx, web_top_k=2))
    [res] = await runner.run([ToolCall("c1", "web", {"query": "nats queue groups"})], CTX)
    assert res.status == "ok"
    assert res.sources == ["https://example.org/0", "https://example.org/1"]
    assert "About nats queue groups 0" in res.output
    assert FakeSearx.queries[-1]["format"] == ["json"]


async def test_http_provider_errors_are_tool_errors(searx: str):
    runner = ToolRunner(ToolSettings(web_provider="http", web_url=searx))
    [res] = await runner.run([ToolCall("c1", "web", {"query": "explode"})], CTX)
    assert res.status == "error" and "500" in res.output
    dead = ToolRunner(ToolSettings(web_provider="http", web_url="http://127.0.0.1:9/search"))
    [res] = await dead.run([ToolCall("c1", "web", {"query": "x"})], CTX)
    assert res.status == "error" and "unreachable" in res.output


def test_http_provider_needs_url():
    with pytest.raises(ValueError):
        WebTool(ToolSettings(web_provider="http"))
