"""Resolve who a request is for: the tenant from the API key, ids from body, query or headers.

Precedence for each id: the request body, then the query string, then the ``X-*-ID`` header.
The tenant never comes from the request; it is "default" when auth is off.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from pydantic import ValidationError

from memmachine.errors import AuthenticationError, InvalidInputError, PermissionDeniedError
from memmachine.models import ProjectScope, Scope
from memmachine_sdk.models import ScopeFields
from memmachine_server.keyring import Keyring, Principal
from memmachine_server.state import AppState, app_state

__all__ = [
    "API_KEY_HEADER",
    "BEARER",
    "SCOPE_HEADERS",
    "AdminPrincipal",
    "Principal",
    "ReadTenant",
    "Tenant",
    "ToolTenant",
    "WriteTenant",
    "authenticate",
    "keyring_of",
    "presented_key",
    "principal_of",
    "resolve_project",
    "resolve_scope",
    "tenant_of",
]

#: The scope ids a request may carry, each with the header it may also come from.
SCOPE_HEADERS = {
    "user_id": "X-User-ID",
    "session_id": "X-Session-ID",
    "agent_id": "X-Agent-ID",
    "group_id": "X-Group-ID",
    "org_id": "X-Org-ID",
    "project_id": "X-Project-ID",
}


#: Methods of requests that store something under their scope.
_CREATING = frozenset({"POST", "PUT", "PATCH"})

#: The two ways to present an API key, as OpenAPI security schemes. They only declare the
#: headers: :func:`authenticate` reads and checks them (and never answers 403 for a
#: missing key, as FastAPI's own checks would).
BEARER = HTTPBearer(
    scheme_name="bearer",
    description="An API key (`memmachine keys create`) as `Authorization: Bearer <key>`.",
    auto_error=False,
)
API_KEY_HEADER = APIKeyHeader(
    name="X-API-Key",
    scheme_name="apiKey",
    description="The same API key in the `X-API-Key` header.",
    auto_error=False,
)


def presented_key(headers: Mapping[str, str]) -> str:
    """The key of ``Authorization: Bearer <key>`` or ``X-API-Key``; ``""`` when none."""
    auth = headers.get("authorization", "")
    presented = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
    return presented or headers.get("x-api-key", "").strip()


def keyring_of(state: AppState) -> Keyring:
    """The app's keyring; one with only the settings' static and admin keys when the state
    was built without one."""
    if state.keyring is None:
        state.keyring = Keyring(state.settings, None)
    return state.keyring


async def authenticate(state: AppState, headers: Mapping[str, str]) -> Principal:
    """The principal behind ``Authorization: Bearer <key>`` (or ``X-API-Key``).

    The one place every interface (REST, MCP over HTTP) turns credentials into a tenant.
    A presented key is always checked, in every mode, and spends one request of its rate
    limit. Without a key the caller is the open ``default`` principal unless the keyring
    requires a key (``MEMMACHINE_AUTH``; see :meth:`Keyring.requires_key`).
    Raises AuthenticationError for a missing (when required), unknown or revoked key and
    RateLimitedError for a key over its limit."""
    keyring = keyring_of(state)
    presented = presented_key(headers)
    if presented:
        principal = keyring.identify(presented)
        await keyring.spend(principal)
        return principal
    if keyring.requires_key():
        raise AuthenticationError("an API key is required (Authorization: Bearer <key>)")
    return Principal(tenant="default")


async def principal_of(
    request: Request,
    state: Annotated[AppState, Depends(app_state)],
    _bearer: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)] = None,
    _api_key: Annotated[str | None, Security(API_KEY_HEADER)] = None,
) -> Principal:
    """:func:`authenticate`, after re-reading the key store when the request presents a
    stored key this process has not seen yet (one the CLI made a moment ago)."""
    presented = presented_key(request.headers)
    if presented:
        await keyring_of(state).refresh_for(presented)
    return await authenticate(state, request.headers)


def tenant_of(principal: Annotated[Principal, Depends(principal_of)]) -> str:
    """The caller's tenant (see :func:`authenticate`)."""
    return principal.tenant


def read_tenant(principal: Annotated[Principal, Depends(principal_of)]) -> str:
    """The caller's tenant when its key may read memories; 403 otherwise."""
    if not principal.can_read:
        raise PermissionDeniedError("this API key may not read memories (no read permission)")
    return principal.tenant


def write_tenant(principal: Annotated[Principal, Depends(principal_of)]) -> str:
    """The caller's tenant when its key may write (and delete) memories; 403 otherwise."""
    if not principal.can_write:
        raise PermissionDeniedError(
            "this API key may not write or delete memories (no write permission)"
        )
    return principal.tenant


async def tool_tenant(
    request: Request, principal: Annotated[Principal, Depends(principal_of)]
) -> str:
    """The caller's tenant for running a tool call: ``recall`` needs read permission,
    ``remember`` and ``forget`` need write permission (any other name needs read and is
    then refused as unknown by the tool runner)."""
    try:
        body = await request.json()
        name = body["tool_call"]["function"]["name"]
    except (ValueError, KeyError, TypeError):
        name = None
    if name in ("remember", "forget"):
        return write_tenant(principal)
    return read_tenant(principal)


def admin_principal(principal: Annotated[Principal, Depends(principal_of)]) -> Principal:
    """The caller when it may manage API keys: ``MEMMACHINE_ADMIN_KEY`` or a key with the
    admin permission; 403 otherwise."""
    if not principal.is_admin:
        raise PermissionDeniedError(
            "managing API keys needs MEMMACHINE_ADMIN_KEY or a key with the admin permission"
        )
    return principal


#: Any authenticated caller's tenant.
Tenant = Annotated[str, Depends(tenant_of)]
#: The tenant of a caller allowed to read memories.
ReadTenant = Annotated[str, Depends(read_tenant)]
#: The tenant of a caller allowed to write or delete memories.
WriteTenant = Annotated[str, Depends(write_tenant)]
#: The tenant of a caller allowed to run the tool call in the body.
ToolTenant = Annotated[str, Depends(tool_tenant)]
#: A caller allowed to manage API keys.
AdminPrincipal = Annotated[Principal, Depends(admin_principal)]


def resolve_scope(
    request: Request,
    tenant: str,
    body: ScopeFields | None = None,
    *,
    session_id: str | None = None,
    user_id: str | None = None,
    require_session: bool = False,
) -> Scope:
    """Build the request's scope; a missing user (or required session) is a 422 naming it."""
    values: dict[str, str] = {}
    overrides = {"session_id": session_id, "user_id": user_id}
    for name in SCOPE_HEADERS:
        value = overrides.get(name)
        if value is None and body is not None:
            value = getattr(body, name)
        if value is None:
            value = request.query_params.get(name) or request.headers.get(SCOPE_HEADERS[name])
        if value is not None:
            values[name] = value
    if "user_id" not in values:
        raise InvalidInputError(
            "user_id is required (in the body, the query or the X-User-ID header)",
            field="user_id",
        )
    if require_session and "session_id" not in values:
        raise InvalidInputError(
            "session_id is required (in the body, the query or the X-Session-ID header)",
            field="session_id",
        )
    if request.method in _CREATING and not request.url.path.endswith("/search"):
        # what a write stores under: ids that hold personal data are refused (a delete may
        # still name one, to remove what was stored before ids were checked)
        app_state(request).manager.gate.check_ids(values)
    try:
        resolved = Scope(tenant=tenant, **values)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        raise InvalidInputError(
            f"{field} must be 1-128 characters of letters, digits and . _ @ + - = # ~ |",
            field=field,
        ) from None
    # Whose write this is: an idempotent answer is filed under it (forgetting reaches it).
    request.state.memmachine_scope = resolved
    return resolved


def resolve_project(request: Request, tenant: str) -> ProjectScope:
    """The request's org and project (query string, then ``X-Org-ID`` / ``X-Project-ID``;
    ``default`` when absent) under the caller's tenant; a malformed id is a 422 naming it."""
    values: dict[str, str] = {}
    for name in ("org_id", "project_id"):
        value = request.query_params.get(name) or request.headers.get(SCOPE_HEADERS[name])
        if value is not None:
            values[name] = value
    try:
        return ProjectScope(tenant=tenant, **values)
    except ValidationError as exc:
        field = ".".join(str(part) for part in exc.errors()[0]["loc"])
        raise InvalidInputError(
            f"{field} must be 1-128 characters of letters, digits and . _ @ + - = # ~ |",
            field=field,
        ) from None
