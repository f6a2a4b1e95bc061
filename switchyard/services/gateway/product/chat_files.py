"""`fileIds` on /chat: the named files join the conversation before its work is published."""

from __future__ import annotations

from switchyard.libs.store.keys import ApiKey
from switchyard.schemas import ErrorCode, FileContent, FileInfo, FileListQuery, FileQuery, FileUpload
from switchyard.schemas import subjects as subj
from switchyard.services.gateway.ask import ask
from switchyard.services.gateway.core import Gateway
from switchyard.services.gateway.errors import ApiError
from switchyard.services.gateway.product.files import fetch_file, fetch_file_list, put_file

MAX_ATTACHED = 10


async def attach_files(gw: Gateway, key: ApiKey, chat_id: str, file_ids: list[str]) -> None:
    """`fileIds` on /chat: make each file part of the conversation before the work is published.

    A library file is copied into the chat (the library keeps its own); one already attached there, or
    copied there by an earlier message, is not added twice. Every id is checked before anything is
    copied, so an unknown one (or another tenant's: the same 404) changes nothing.
    """
    ids = list(dict.fromkeys(file_ids))
    if len(ids) > MAX_ATTACHED:
        raise ApiError(ErrorCode.bad_request, f"at most {MAX_ATTACHED} files per message")
    wanted = [await fetch_file(gw, key.tenant, fid) for fid in ids]
    if not wanted:
        return
    present = await fetch_file_list(gw, FileListQuery(tenant=key.tenant, chat_id=chat_id))
    for f in wanted:
        if f.info.chat_id == chat_id or await _copied(gw, key, f, present.items):
            continue
        upload = FileUpload(
            tenant=key.tenant,
            user=key.user,
            name=f.info.name,
            media_type=f.info.media_type,
            text=f.text,
            chat_id=chat_id,
        )
        present.items.append(await put_file(gw, upload))


async def _copied(gw: Gateway, key: ApiKey, f: FileContent, attached: list[FileInfo]) -> bool:
    for info in attached:
        if (info.name, info.chars, info.media_type) != (f.info.name, f.info.chars, f.info.media_type):
            continue
        got = await ask(
            gw, subj.FILES_GET, FileQuery(tenant=key.tenant, id=info.id), FileContent, tenant=key.tenant, missing="file"
        )
        if got.text == f.text:
            return True
    return False
