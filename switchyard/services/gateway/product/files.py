"""The context service's files, asked for as the gateway asks for them: the /v1/files routes and /chat's
`fileIds` (chat_files.py) make the same requests and name the same thing when it is not found."""

from __future__ import annotations

from switchyard.schemas import FileContent, FileInfo, FileList, FileListQuery, FileQuery, FileUpload
from switchyard.schemas import subjects as subj
from switchyard.services.gateway.ask import ask
from switchyard.services.gateway.core import Gateway


async def fetch_file(gw: Gateway, tenant: str, file_id: str) -> FileContent:
    query = FileQuery(tenant=tenant, id=file_id)
    return await ask(gw, subj.FILES_GET, query, FileContent, tenant=tenant, missing=f"file {file_id!r}")


async def fetch_file_list(gw: Gateway, query: FileListQuery) -> FileList:
    return await ask(gw, subj.FILES_LIST, query, FileList, tenant=query.tenant, missing="files")


async def put_file(gw: Gateway, upload: FileUpload) -> FileInfo:
    """A 404 names the conversation: the one file put into a chat that is not there (or not the tenant's)."""
    missing = f"conversation {upload.chat_id!r}"
    return await ask(gw, subj.FILES_PUT, upload, FileInfo, tenant=upload.tenant, missing=missing)
