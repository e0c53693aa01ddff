"""Which ``Host`` and ``Origin`` a server answers: the defence against DNS rebinding.

A web page can make a browser send requests to ``127.0.0.1`` under a name the page's author
controls (DNS rebinding), or from its own origin. A server that answers requests without a
key would then hand that page everyone's memories. So the server answers only the host
names and page origins of an allow-list (:func:`allowed_hosts`): ``MEMMACHINE_ALLOWED_HOSTS``
when set (``*`` = any), else the loopback names while the server is bound to a loopback
address and serves without a key. A request from elsewhere gets 421 (``Host``) or 403
(``Origin``) before any route, REST and ``/mcp`` alike; the MCP transport's own rebinding
protection is on with the same list (:func:`mcp_transport_security`).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from memmachine.config import Settings
from memmachine_sdk.models import ErrorDetail
from memmachine_server.errors import error_response
from memmachine_server.keyring import Keyring

__all__ = ["LOOPBACK_NAMES", "HostAllowList", "allowed_hosts", "mcp_transport_security"]

#: The names a browser uses for this machine.
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
_ANY = "*"


def allowed_hosts(settings: Settings, keyring: Keyring) -> tuple[str, ...] | None:
    """The host names answered (lower case, no port), or ``None`` for any."""
    configured = [name.strip().lower() for name in settings.allowed_hosts if name.strip()]
    if configured:
        return None if _ANY in configured else tuple(configured)
    if keyring.loopback and not keyring.requires_key():
        return LOOPBACK_NAMES
    return None


def host_name(value: str) -> str:
    """``value`` (a ``Host`` header or URL netloc) without its port, lower case."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[: value.find("]") + 1] if "]" in value else value
    return value.rpartition(":")[0] if value.count(":") == 1 else value


def refusal(headers: Headers, allowed: tuple[str, ...]) -> tuple[int, ErrorDetail] | None:
    """Why a request with ``headers`` is not answered (status and error), or ``None``."""
    host = host_name(headers.get("host", ""))
    if host not in allowed:
        return 421, ErrorDetail(
            code="host_not_allowed",
            message=(
                f"this server does not answer for host {host or '(none)'!r}; add it to "
                "MEMMACHINE_ALLOWED_HOSTS"
            ),
        )
    origin = headers.get("origin")
    if origin is not None and host_name(urlsplit(origin).netloc) not in allowed:
        return 403, ErrorDetail(
            code="origin_not_allowed",
            message=(
                f"requests from pages of {origin!r} are refused; add its host to "
                "MEMMACHINE_ALLOWED_HOSTS"
            ),
        )
    return None


class HostAllowList:
    """ASGI middleware refusing requests for hosts or from origins not allowed (see the
    module docstring); lets everything through until the app has started."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state = getattr(getattr(scope.get("app"), "state", None), "memmachine", None)
        if scope["type"] != "http" or state is None or state.keyring is None:
            await self.app(scope, receive, send)
            return
        allowed = allowed_hosts(state.settings, state.keyring)
        refused = None if allowed is None else refusal(Headers(scope=scope), allowed)
        if refused is None:
            await self.app(scope, receive, send)
            return
        status, detail = refused
        await error_response(status, detail)(scope, receive, send)


def mcp_transport_security(settings: Settings, keyring: Keyring) -> TransportSecuritySettings:
    """The MCP SDK's rebinding protection for the hosts :func:`allowed_hosts` gives now (on
    whenever the list is not "any"), any port."""
    allowed = allowed_hosts(settings, keyring)
    if allowed is None:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[pattern for name in allowed for pattern in (name, f"{name}:*")],
        allowed_origins=[
            pattern
            for name in allowed
            for scheme in ("http", "https")
            for pattern in (f"{scheme}://{name}", f"{scheme}://{name}:*")
        ],
    )
