"""Managing API keys: /v1/admin/keys.

Allowed to ``MEMMACHINE_ADMIN_KEY`` (every tenant) and to keys with the ``admin``
permission (their own tenant only: another tenant's key is a 404, naming another tenant a
403). A new key is returned once, in full; lists never show a key or its hash.
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from memmachine.auth import ApiKey, StoredKey, issue_key
from memmachine.errors import InvalidInputError, PermissionDeniedError, StoreUnavailableError
from memmachine.ports import KeyStore
from memmachine_sdk import models as wire
from memmachine_server.keyring import Keyring, Principal
from memmachine_server.openapi import AUTH_ERRORS, errors
from memmachine_server.scope import AdminPrincipal, keyring_of
from memmachine_server.state import app_state

__all__ = ["key_out", "router"]

router = APIRouter(prefix="/v1/admin", tags=["admin"], responses=AUTH_ERRORS)


def key_out(key: ApiKey) -> wire.ApiKeyOut:
    return wire.ApiKeyOut(
        id=key.key_id,
        tenant=key.tenant,
        name=key.name,
        permissions=list(key.permissions),
        rate_limit_per_minute=key.rate_limit_per_minute,
        created_at=key.created_at,
        revoked_at=key.revoked_at,
    )


def _keys(request: Request) -> tuple[Keyring, KeyStore]:
    keyring = keyring_of(app_state(request))
    if keyring.store is None:
        raise StoreUnavailableError("this server has no key store", store="keys")
    return keyring, keyring.store


def _tenant_for(principal: Principal, asked: str | None) -> str | None:
    """The tenant an admin request acts on: what it asked for (``None`` = all, only for
    ``MEMMACHINE_ADMIN_KEY``), or the admin key's own tenant."""
    if principal.all_tenants:
        return asked
    if asked is not None and asked != principal.tenant:
        raise PermissionDeniedError(
            f"this admin key manages tenant {principal.tenant!r} only, not {asked!r}"
        )
    return principal.tenant


@router.post(
    "/keys",
    status_code=201,
    response_model=wire.CreatedKeyOut,
    responses=errors(403, 413, 422),
)
async def create_key(
    body: wire.CreateKeyRequest, request: Request, principal: AdminPrincipal
) -> wire.CreatedKeyOut:
    """Create a key; the response carries the key itself, shown only this once."""
    keyring, store = _keys(request)
    tenant = _tenant_for(principal, body.tenant)
    if tenant is None:
        raise InvalidInputError("tenant is required", field="tenant")
    issued = issue_key(
        tenant,
        name=body.name,
        permissions=body.permissions,
        rate_limit_per_minute=body.rate_limit_per_minute,
    )
    record = await store.create(issued.record, issued.secret_hash)
    keyring.remember(StoredKey(record, issued.secret_hash))
    return wire.CreatedKeyOut(key=issued.token, **key_out(record).model_dump())


@router.get("/keys", response_model=wire.ApiKeyListResponse, responses=errors(403, 422))
async def list_keys(
    request: Request, principal: AdminPrincipal, tenant: str | None = None
) -> wire.ApiKeyListResponse:
    """Keys of one tenant (every tenant's for ``MEMMACHINE_ADMIN_KEY`` without ``tenant``),
    revoked ones included, oldest first."""
    _, store = _keys(request)
    keys = await store.list_keys(_tenant_for(principal, tenant))
    return wire.ApiKeyListResponse(keys=[key_out(key) for key in keys])


@router.delete("/keys/{key_id}", response_model=wire.ApiKeyOut, responses=errors(403, 404))
async def revoke_key(key_id: str, request: Request, principal: AdminPrincipal) -> wire.ApiKeyOut:
    """Revoke a key: from now on it gets 401 here (other server processes within
    ``MEMMACHINE_KEY_REFRESH_SECONDS``)."""
    keyring, store = _keys(request)
    key = await store.revoke(key_id, None if principal.all_tenants else principal.tenant)
    await keyring.forget(key_id)
    return key_out(key)
