"""Resolve who a request is for: the tenant from the API key, ids from body, query or headers.

Precedence for each id: the request body, then the query string, then the ``X-*-ID`` header.
The tenant never comes from the request; it is "default" when auth is off.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from pydantic import ValidationError

from memmachine.errors import AuthenticationError, InvalidInputError
from memmachine.models import Scope
from memmachine_sdk.models import ScopeFields
from memmachine_server.state import AppState, app_state

_FIELDS = ("user_id", "session_id", "agent_id", "group_id", "org_id", "project_id")
_HEADERS = {
    "user_id": "x-user-id",
    "session_id": "x-session-id",
    "agent_id": "x-agent-id",
    "group_id": "x-group-id",
    "org_id": "x-org-id",
    "project_id": "x-project-id",
}


@dataclass(frozen=True)
class Principal:
    """Who is calling: the tenant their key belongs to and what the key may do.

    In open mode (no auth) every caller is the ``default`` tenant with every right."""

    tenant: str
    key_id: str | None = None
    can_read: bool = True
    can_write: bool = True
    is_admin: bool = False


def authenticate(state: AppState, headers: Mapping[str, str]) -> Principal:
    """The principal behind ``Authorization: Bearer <key>`` (or ``X-API-Key``).

    The one place every interface (REST, MCP over HTTP) turns credentials into a tenant.
    Raises AuthenticationError for a missing or unknown key."""
    keys = state.api_keys
    if not keys:
        return Principal(tenant="default")
    auth = headers.get("authorization", "")
    presented = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
    presented = presented or headers.get("x-api-key", "")
    if not presented:
        raise AuthenticationError("an API key is required (Authorization: Bearer <key>)")
    for key, tenant in keys.items():
        if hmac.compare_digest(key.encode(), presented.encode()):
            return Principal(tenant=tenant, key_id=None)
    raise AuthenticationError("unknown API key")


def principal_of(request: Request, state: Annotated[AppState, Depends(app_state)]) -> Principal:
    return authenticate(state, request.headers)


def tenant_of(principal: Annotated[Principal, Depends(principal_of)]) -> str:
    """The caller's tenant (see :func:`authenticate`)."""
    return principal.tenant


Tenant = Annotated[str, Depends(tenant_of)]


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
    for name in _FIELDS:
        value = overrides.get(name)
        if value is None and body is not None:
            value = getattr(body, name)
        if value is None:
            value = request.query_params.get(name) or request.headers.get(_HEADERS[name])
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
    try:
        return Scope(tenant=tenant, **values)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        raise InvalidInputError(
            f"{field} must be 1-128 characters of letters, digits and . _ @ + - = # ~ |",
            field=field,
        ) from None
