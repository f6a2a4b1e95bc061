"""The pages: the chat page at `/`, the operator console at `/console`, the API docs at `/docs`. Static
HTML, vanilla JS and CSS from `static/` (Starlette's StaticFiles), no build step.

No page holds a secret: each asks for a key and calls the same API any client does (the console, the
admin routes), so serving them needs no key, and none takes a key from its address without the user's
confirming it. The content security policy (security_headers.py) allows only our own scripts and styles, so
text the model writes can never run as code even if the markdown renderer let some HTML through.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse
from starlette.staticfiles import StaticFiles

router = APIRouter()

STATIC = Path(__file__).parent / "static"
# The content security policy, nosniff and the referrer policy come with every response (security_headers.py).
HEADERS = {"cache-control": "no-cache"}


class Assets(StaticFiles):
    """StaticFiles that sends the pages' headers with every file."""

    def __init__(self, directory: Path, headers: dict[str, str]):
        super().__init__(directory=directory)
        self.headers = headers

    def file_response(self, *args: Any, **kwargs: Any) -> Any:
        response = super().file_response(*args, **kwargs)
        response.headers.update(self.headers)
        return response


def install(app: FastAPI) -> None:
    app.include_router(router)
    app.mount("/static", Assets(STATIC, HEADERS), name="static")
    app.mount("/console", Assets(STATIC / "console", HEADERS), name="console")


@router.get("/", include_in_schema=False)
async def page() -> FileResponse:
    return FileResponse(STATIC / "chat.html", media_type="text/html; charset=utf-8", headers=HEADERS)


@router.get("/console", include_in_schema=False)
async def console() -> FileResponse:
    return FileResponse(STATIC / "console" / "console.html", media_type="text/html", headers=HEADERS)


# Our own page rather than Swagger UI: that one loads its scripts from a CDN, which neither this
# machine's network nor the pages' content security policy allows.
@router.get("/docs", include_in_schema=False)
async def docs_page() -> FileResponse:
    return FileResponse(STATIC / "docs.html", media_type="text/html; charset=utf-8", headers=HEADERS)
