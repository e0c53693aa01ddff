"""Refuse what no route could use before a route sees it: request bodies over the configured
size (before they are read into memory) and URLs carrying a NUL character."""

from __future__ import annotations

from urllib.parse import parse_qsl

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memmachine_sdk.models import ErrorDetail
from memmachine_server.errors import error_response


class BodySizeLimit:
    """ASGI middleware: 413 when Content-Length, or the bytes actually streamed, exceed
    ``max_bytes``."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(scope, receive, send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    # An HTTPException passes FastAPI's body parsing untouched and is
                    # rendered by the error handlers as a 413.
                    raise HTTPException(413, self._message())
            return message

        await self.app(scope, counted, send)

    def _message(self) -> str:
        return f"request body is larger than {self.max_bytes} bytes"

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error_response(
            413,
            ErrorDetail(code="payload_too_large", message=self._message()),
        )
        await response(scope, receive, send)


class UrlTextCheck:
    """ASGI middleware: 422 naming the parameter when the path or a query parameter holds a
    NUL character (``%00``), which no store keeps; the request models check bodies."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        field = _nul_field(scope) if scope["type"] == "http" else None
        if field is None:
            await self.app(scope, receive, send)
            return
        response = error_response(
            422,
            ErrorDetail(
                code="invalid_input",
                message=f"{field}: contains a NUL character (%00)",
                field=field,
            ),
        )
        await response(scope, receive, send)


def _nul_field(scope: Scope) -> str | None:
    """The parameter (``path`` for the path itself) holding a NUL, or ``None``."""
    if "\x00" in str(scope.get("path", "")):
        return "path"
    query = bytes(scope.get("query_string") or b"").decode("latin-1")
    for name, value in parse_qsl(query, keep_blank_values=True):
        if "\x00" in name or "\x00" in value:
            return name.replace("\x00", "") or "query"
    return None
