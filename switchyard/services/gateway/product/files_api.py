"""Uploads: text, markdown and PDF (its text layer, through pypdf) become files the context service
keeps. A file lands in the user's library, or attached to a conversation (form field `chatId`, or
`fileIds` on a later `/chat`); an attached file's text joins that chat's prompts within the budget.

No python-multipart here: one form with one file is all we take, parsed with the standard library.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from email.message import Message
from email.parser import BytesHeaderParser
from pathlib import PurePosixPath

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from switchyard.schemas import (
    DeleteAck,
    ErrorCode,
    FileContent,
    FileInfo,
    FileList,
    FileListQuery,
    FileQuery,
    FileUpload,
)
from switchyard.schemas import subjects as subj
from switchyard.services.gateway.ask import ask
from switchyard.services.gateway.auth import Principal
from switchyard.services.gateway.body import read_body
from switchyard.services.gateway.core import Gw
from switchyard.services.gateway.errors import ApiError
from switchyard.services.gateway.ids import CHAT_ID_PATTERN, ChatIdQuery, FileIdPath
from switchyard.services.gateway.product.files import fetch_file, fetch_file_list, put_file
from switchyard.services.gateway.product.pdf import PdfReader

router = APIRouter()

# The whole multipart body (a PDF is mostly not text): the app's body limit for uploads. The text kept is limited again, in characters,
# by the context service.
MAX_UPLOAD_BYTES = 10 * 1024 * 1024
# The text read from an upload, as the JSON string it travels in: one bus message carries it to the
# context service, and NATS refuses messages over its maximum payload (1 MiB by default). Over this,
# 413 names the limit; documented in switchyard/services/gateway/README.md and the OpenAPI document.
MAX_FILE_TEXT_BYTES = 512 * 1024

TEXT_TYPES = {"text/plain": "text/plain", "text/markdown": "text/markdown", "text/x-markdown": "text/markdown"}
PDF = "application/pdf"
BY_SUFFIX = {
    ".txt": "text/plain",
    ".text": "text/plain",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".pdf": PDF,
}
UNTYPED = {"", "application/octet-stream"}


@dataclass
class Part:
    name: str
    filename: str | None
    media_type: str
    data: bytes


def _boundary(content_type: str) -> bytes:
    msg = Message()
    msg["content-type"] = content_type
    if msg.get_content_type() != "multipart/form-data":
        raise ApiError(ErrorCode.unsupported_media_type, f"upload as multipart/form-data, got {content_type!r}")
    boundary = msg.get_param("boundary")
    if not isinstance(boundary, str) or not boundary:
        raise ApiError(ErrorCode.bad_request, "multipart body without a boundary")
    return boundary.encode("latin-1")


def parse_form(content_type: str, body: bytes) -> list[Part]:
    """The parts of a multipart/form-data body (RFC 7578), in order."""
    delimiter = b"\r\n--" + _boundary(content_type)
    chunks = (b"\r\n" + body).split(delimiter)
    parts: list[Part] = []
    closed = False
    for chunk in chunks[1:]:
        if chunk.startswith(b"--"):
            closed = True
            break
        head, sep, data = chunk.partition(b"\r\n\r\n")
        if not sep:
            raise ApiError(ErrorCode.bad_request, "malformed multipart part (no header end)")
        headers = BytesHeaderParser().parsebytes(head.lstrip(b" \t").removeprefix(b"\r\n") + b"\r\n\r\n")
        name = headers.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            raise ApiError(ErrorCode.bad_request, "multipart part without a name")
        filename = headers.get_filename()
        media = headers.get_content_type() if headers.get("content-type") else ""
        parts.append(Part(name, filename, media.lower(), data))
    if not closed:
        raise ApiError(ErrorCode.bad_request, "truncated multipart body (no closing boundary)")
    return parts


def media_type_of(filename: str, declared: str) -> str:
    """What we will read the bytes as: the declared type when it is one we take, else the suffix's."""
    if declared in TEXT_TYPES:
        return TEXT_TYPES[declared]
    if declared == PDF:
        return PDF
    suffix = PurePosixPath(filename).suffix.lower()
    if declared in UNTYPED and suffix in BY_SUFFIX:
        return BY_SUFFIX[suffix]
    what = declared if declared not in UNTYPED else (suffix or "a file without a suffix")
    raise ApiError(ErrorCode.unsupported_media_type, f"cannot read {what}: upload text, markdown or PDF")


async def extract_text(data: bytes, media_type: str, pdf: PdfReader) -> str:
    if media_type == PDF:
        if not data.startswith(b"%PDF-"):
            raise ApiError(ErrorCode.bad_request, "not a PDF (no %PDF- header)")
        # In a child process under limits: a hostile PDF costs that process, not the gateway's streams.
        text = await pdf.text(data)
        if not text:
            raise ApiError(ErrorCode.bad_request, "this PDF has no text layer (a scan?): nothing to read")
        return text
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ApiError(ErrorCode.bad_request, f"file is not valid UTF-8 (byte {e.start})") from e
    if "\x00" in text:
        raise ApiError(ErrorCode.unsupported_media_type, "file holds NUL bytes: binary files cannot be uploaded")
    if not text.strip():
        raise ApiError(ErrorCode.bad_request, "file is empty")
    return text.replace("\r\n", "\n")


# Read by the handler itself (multipart, under the limits above), so the document is told its shape here.
UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "file": {"type": "string", "format": "binary", "description": "text, markdown or PDF"},
                        "chatId": {"type": "string", "description": "attach to this conversation"},
                    },
                }
            }
        },
    }
}


@router.post("/v1/files", status_code=201, response_model=FileInfo, openapi_extra=UPLOAD_BODY)
async def upload(request: Request, gw: Gw, key: Principal) -> JSONResponse:
    """multipart/form-data: `file` (required), `chatId` (optional: attach to that conversation)."""
    content_type = request.headers.get("content-type", "")
    _boundary(content_type)  # the wrong type fails before the body is read
    parts = parse_form(content_type, await read_body(request))
    files = [p for p in parts if p.name == "file"]
    if len(files) != 1 or files[0].filename is None:
        raise ApiError(ErrorCode.bad_request, "send exactly one file, in the form field `file`")
    part = files[0]
    fields = {p.name: p.data.decode("utf-8", "replace").strip() for p in parts if p.filename is None}
    chat_id = fields.get("chatId") or fields.get("chat_id") or None
    if chat_id is not None and not re.fullmatch(CHAT_ID_PATTERN, chat_id):
        raise ApiError(ErrorCode.bad_request, f"chatId {chat_id!r} is not a conversation id")
    name = PurePosixPath((part.filename or "").replace("\\", "/")).name.strip() or "upload"
    media_type = media_type_of(name, part.media_type)
    text = await extract_text(part.data, media_type, gw.pdf)
    size = len(json.dumps(text, ensure_ascii=False).encode("utf-8", "surrogatepass")) - 2
    if size > MAX_FILE_TEXT_BYTES:
        raise ApiError(
            ErrorCode.payload_too_large,
            f"the file's text is {size} bytes; uploads are limited to {MAX_FILE_TEXT_BYTES} bytes "
            f"({MAX_FILE_TEXT_BYTES // 1024} KiB) of text",
        )
    file_upload = FileUpload(
        tenant=key.tenant, user=key.user, name=name[:255], media_type=media_type, text=text, chat_id=chat_id
    )
    info = await put_file(gw, file_upload)
    return JSONResponse(info.model_dump(mode="json"), status_code=201)


@router.get("/v1/files", response_model=FileList)
async def list_files(gw: Gw, key: Principal, chat_id: ChatIdQuery = None) -> JSONResponse:
    got = await fetch_file_list(gw, FileListQuery(tenant=key.tenant, user=key.user, chat_id=chat_id))
    return JSONResponse(got.model_dump(mode="json"))


@router.get("/v1/files/{file_id}", response_model=FileContent)
async def get_file(file_id: FileIdPath, gw: Gw, key: Principal) -> JSONResponse:
    got = await fetch_file(gw, key.tenant, file_id)
    return JSONResponse(got.model_dump(mode="json"))


@router.delete("/v1/files/{file_id}", response_model=DeleteAck)
async def delete_file(file_id: FileIdPath, gw: Gw, key: Principal) -> JSONResponse:
    ack = await ask(
        gw,
        subj.FILES_DELETE,
        FileQuery(tenant=key.tenant, id=file_id),
        DeleteAck,
        tenant=key.tenant,
        missing=f"file {file_id!r}",
    )
    return JSONResponse(ack.model_dump(mode="json"))
