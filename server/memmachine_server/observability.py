"""Per-request observability: the request id, one log line, the HTTP metrics, and
``/metrics`` with its access rule.

:class:`RequestObserver` (pure ASGI middleware, outermost but for the error middleware):

* takes the request's ``X-Request-ID`` when it is well formed
  (:data:`memmachine.telemetry.REQUEST_ID_PATTERN`), else makes one, binds it for the
  request (so log lines, spans and enqueued jobs carry it) and returns it in the
  ``X-Request-ID`` response header;
* records ``memmachine_http_requests_total`` and ``..._duration_seconds`` by method, route
  *template* (``/v1/sessions/{session_id}/working``, never the path, which holds ids;
  ``unmatched`` for a path no route serves) and status;
* writes one log line per request on the ``memmachine.access`` logger: method, route,
  status, duration in ms and the request id (``/health`` and ``/metrics`` at DEBUG, so
  probes and scrapes do not flood the log);
* answers an exception nothing handled with the usual JSON 500 (and the header) itself.

``/metrics`` (see :func:`metrics_access`): open when the server serves requests without a
key (loopback without keys, or ``MEMMACHINE_AUTH=off``); otherwise it needs
``MEMMACHINE_METRICS_KEY`` or ``MEMMACHINE_ADMIN_KEY`` as the bearer token: a tenant's key,
even an admin one, gets 403 (the numbers are the whole server's, every tenant's together).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from collections.abc import Mapping

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memmachine.errors import AuthenticationError, PermissionDeniedError
from memmachine.telemetry import Metrics, bind_request_id, new_request_id, valid_request_id
from memmachine_sdk.models import ErrorDetail
from memmachine_server.errors import error_response, route_of
from memmachine_server.keyring import Keyring
from memmachine_server.scope import presented_key

__all__ = ["REQUEST_ID_HEADER", "RequestObserver", "metrics_access"]

REQUEST_ID_HEADER = "X-Request-ID"
_QUIET_ROUTES = frozenset({"/health", "/metrics"})

access_log = logging.getLogger("memmachine.access")
log = logging.getLogger("memmachine.server")


class RequestObserver:
    """ASGI middleware: request id, access log line and HTTP metrics (see the module)."""

    def __init__(self, app: ASGIApp, metrics: Metrics | None = None) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = _header(scope, b"x-request-id")
        request_id = (
            incoming if incoming is not None and valid_request_id(incoming) else new_request_id()
        )
        status = 500
        started = time.perf_counter()
        response_started = False

        async def tagged(message: Message) -> None:
            nonlocal status, response_started
            if message["type"] == "http.response.start":
                response_started = True
                status = int(message["status"])
                headers = list(message.get("headers") or [])
                headers.append((b"x-request-id", request_id.encode("ascii")))
                message = {**message, "headers": headers}
            await send(message)

        with bind_request_id(request_id):
            try:
                await self.app(scope, receive, tagged)
            except Exception:
                log.exception("unhandled error on %s %s", scope.get("method"), route_of(scope))
                if response_started:
                    raise
                status = 500
                response = error_response(
                    500, ErrorDetail(code="internal_error", message="internal error")
                )
                await response(scope, receive, tagged)
            finally:
                self._record(scope, status, time.perf_counter() - started, request_id)

    def _record(self, scope: Scope, status: int, seconds: float, request_id: str) -> None:
        method = str(scope.get("method", ""))
        route = route_of(scope)
        if self.metrics is not None:
            self.metrics.observe_request(method, route, status, seconds)
        access_log.log(
            logging.DEBUG if route in _QUIET_ROUTES else logging.INFO,
            "%s %s %d %.1f ms",
            method,
            route,
            status,
            seconds * 1000,
            extra={
                "request_id": request_id,
                "method": method,
                "route": route,
                "status": status,
                "duration_ms": round(seconds * 1000, 2),
            },
        )


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or []:
        if key.lower() == name:
            try:
                text: str = value.decode("ascii")
            except UnicodeDecodeError:
                return None
            return text
    return None


def metrics_access(keyring: Keyring, metrics_key: str | None, headers: Mapping[str, str]) -> None:
    """Raise unless this request may read ``/metrics`` (see the module docstring)."""
    if not keyring.requires_key():
        return
    token = presented_key(headers)
    if not token:
        raise AuthenticationError(
            "/metrics needs MEMMACHINE_METRICS_KEY or MEMMACHINE_ADMIN_KEY "
            "(Authorization: Bearer <key>)"
        )
    digest = hashlib.sha256(token.encode("utf-8")).hexdigest()
    for allowed in (metrics_key, _admin_key(keyring)):
        if allowed and hmac.compare_digest(
            digest, hashlib.sha256(allowed.encode("utf-8")).hexdigest()
        ):
            return
    keyring.identify(token)  # AuthenticationError for a key nobody issued
    raise PermissionDeniedError(
        "/metrics needs MEMMACHINE_METRICS_KEY or MEMMACHINE_ADMIN_KEY, not a tenant's key"
    )


def _admin_key(keyring: Keyring) -> str | None:
    admin = keyring.settings.admin_key
    return admin.get_secret_value().strip() if admin is not None else None
