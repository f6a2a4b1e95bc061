"""Saved memory (per user) and tenant instructions (set by an admin): what context renders into the
system block of every prompt after they change. The tenant's safety policy (set by an admin) lives
next to its instructions and applies from the next request on."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from switchyard.schemas import (
    DeleteAck,
    Instructions,
    InstructionsQuery,
    MemoryAdd,
    MemoryDelete,
    MemoryItem,
    MemoryList,
    MemoryQuery,
    SafetyPolicyEntry,
    SafetyPolicyQuery,
    TenantSafety,
)
from switchyard.schemas import subjects as subj
from switchyard.schemas.subjects import SAFETY_POLICY_GET, SAFETY_POLICY_SET
from switchyard.services.gateway.ask import ask
from switchyard.services.gateway.auth import AdminKey, Principal
from switchyard.services.gateway.body import json_body
from switchyard.services.gateway.core import Gw
from switchyard.services.gateway.ids import ItemIdPath

router = APIRouter()
# Included by the app under the admin guard.
admin_router = APIRouter()


class NewMemory(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    text: str = Field(min_length=1, max_length=2000)


class SetInstructions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tenant: str = Field(min_length=1, max_length=200)
    # Empty clears them.
    text: str = Field(max_length=20000)


class SetSafetyPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tenant: str = Field(min_length=1, max_length=200)
    # The whole policy: fields left out take their defaults (`{}` restores every default).
    policy: TenantSafety


@router.get("/v1/memory", response_model=MemoryList)
async def memory_list(gw: Gw, key: Principal) -> JSONResponse:
    items = await ask(
        gw,
        subj.MEMORY_LIST,
        MemoryQuery(tenant=key.tenant, user=key.user),
        MemoryList,
        tenant=key.tenant,
        missing="memory",
    )
    return JSONResponse(items.model_dump(mode="json"))


@router.post("/v1/memory", status_code=201, response_model=MemoryItem)
async def memory_add(gw: Gw, key: Principal, body: Annotated[NewMemory, json_body(NewMemory)]) -> JSONResponse:
    item = await ask(
        gw,
        subj.MEMORY_ADD,
        MemoryAdd(tenant=key.tenant, user=key.user, text=body.text),
        MemoryItem,
        tenant=key.tenant,
        missing="memory",
    )
    return JSONResponse(item.model_dump(mode="json"), status_code=201)


@router.delete("/v1/memory/{item_id}", response_model=DeleteAck)
async def memory_delete(item_id: ItemIdPath, gw: Gw, key: Principal) -> JSONResponse:
    ack = await ask(
        gw,
        subj.MEMORY_DELETE,
        MemoryDelete(tenant=key.tenant, user=key.user, id=item_id),
        DeleteAck,
        tenant=key.tenant,
        missing=f"memory item {item_id!r}",
    )
    return JSONResponse(ack.model_dump(mode="json"))


@admin_router.put("/v1/admin/instructions", response_model=Instructions)
async def instructions_set(gw: Gw, body: Annotated[SetInstructions, json_body(SetInstructions)]) -> JSONResponse:
    saved = await ask(
        gw,
        subj.INSTRUCTIONS_SET,
        Instructions(tenant=body.tenant, text=body.text),
        Instructions,
        tenant=body.tenant,
        missing="instructions",
    )
    return JSONResponse(saved.model_dump(mode="json"))


@admin_router.get("/v1/admin/instructions", response_model=Instructions)
async def instructions_get(
    gw: Gw, key: AdminKey, tenant: Annotated[str | None, Query(min_length=1, max_length=200)] = None
) -> JSONResponse:
    """`?tenant=`; without it, the admin key's own tenant."""
    who = tenant or key.tenant
    got = await ask(
        gw, subj.INSTRUCTIONS_GET, InstructionsQuery(tenant=who), Instructions, tenant=who, missing="instructions"
    )
    return JSONResponse(got.model_dump(mode="json"))


@admin_router.put("/v1/admin/safety-policy", response_model=SafetyPolicyEntry)
async def safety_policy_set(gw: Gw, body: Annotated[SetSafetyPolicy, json_body(SetSafetyPolicy)]) -> JSONResponse:
    saved = await ask(
        gw,
        SAFETY_POLICY_SET,
        SafetyPolicyEntry(tenant=body.tenant, policy=body.policy),
        SafetyPolicyEntry,
        tenant=body.tenant,
        missing="safety policy",
    )
    return JSONResponse(saved.model_dump(mode="json"))


@admin_router.get("/v1/admin/safety-policy", response_model=SafetyPolicyEntry)
async def safety_policy_get(
    gw: Gw, key: AdminKey, tenant: Annotated[str | None, Query(min_length=1, max_length=200)] = None
) -> JSONResponse:
    """`?tenant=`; without it, the admin key's own tenant. A tenant that set nothing gets the defaults."""
    who = tenant or key.tenant
    got = await ask(
        gw, SAFETY_POLICY_GET, SafetyPolicyQuery(tenant=who), SafetyPolicyEntry, tenant=who, missing="safety policy"
    )
    return JSONResponse(got.model_dump(mode="json"))
