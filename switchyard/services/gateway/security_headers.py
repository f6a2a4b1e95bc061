"""Headers that keep the gateway's pages and answers from being framed, sniffed or leaked, on every response.

One policy for everything the gateway serves: the pages (chat, console, API docs) load only their own
scripts and styles, so text a model or a user wrote can never run as code, and no other site may frame a
page to trick a click on it (`frame-ancestors 'none'`, and `X-Frame-Options` for browsers that predate it).
A JSON or SSE body under the same policy is harmless. `nosniff` stops a browser from running an answer
or an uploaded file as a script or a page; `no-referrer` keeps a page's address (a chat id) from other
sites. A response that sets one of these itself keeps its own.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
}


class SecurityHeaders:
    """Adds `SECURITY_HEADERS` to every HTTP response, errors and streams included."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)
