"""The chat page at `/`: static HTML, vanilla JS and CSS from `static/`, no build step.

The page holds no secret: it asks for an API key and calls the same public API any client does. The
content security policy allows only our own scripts and styles, so text the model writes can never run
as code even if the markdown renderer let some HTML through.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

from schemas import ErrorCode
from services.gateway.errors import ApiError

router = APIRouter()

STATIC = Path(__file__).parent / "static"
HEADERS = {
    "cache-control": "no-cache",
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}


def _file(name: str, media_type: str) -> FileResponse:
    return FileResponse(STATIC / name, media_type=media_type, headers=HEADERS)


@router.get("/", include_in_schema=False)
async def page() -> FileResponse:
    return _file("chat.html", "text/html; charset=utf-8")


@router.get("/static/chat.js", include_in_schema=False)
async def script() -> FileResponse:
    return _file("chat.js", "text/javascript; charset=utf-8")


@router.get("/static/chat.markdown.js", include_in_schema=False)
async def markdown() -> FileResponse:
    return _file("chat.markdown.js", "text/javascript; charset=utf-8")


# The console is static too: the page asks for the admin key and calls the admin routes, so serving it
# needs no key (it holds no data).
@router.get("/console", include_in_schema=False)
async def console() -> FileResponse:
    return FileResponse(STATIC / "console.html", media_type="text/html", headers={"Cache-Control": "no-cache"})


@router.get("/console/{name}", include_in_schema=False)
async def console_asset(name: str) -> FileResponse:
    if name not in ("console.js", "console.css"):
        raise ApiError(ErrorCode.not_found, "no such route")
    media = "text/javascript" if name.endswith(".js") else "text/css"
    return FileResponse(STATIC / name, media_type=media, headers={"Cache-Control": "no-cache"})


@router.get("/static/chat.css", include_in_schema=False)
async def style() -> FileResponse:
    return _file("chat.css", "text/css; charset=utf-8")
