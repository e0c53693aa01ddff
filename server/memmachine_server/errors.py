"""Map the core's error tree to HTTP responses. One place, no per-route try/except."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from memmachine.errors import (
    AuthenticationError,
    ConfigurationError,
    ConflictError,
    InvalidInputError,
    MemMachineError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RateLimitedError,
    StoreError,
    UnsupportedMediaTypeError,
    WriteOutcomeUnknownError,
)
from memmachine_sdk.models import ErrorBody, ErrorDetail

log = logging.getLogger("memmachine.server")

_STATUS: list[tuple[type[MemMachineError], int]] = [
    (PayloadTooLargeError, 413),
    (UnsupportedMediaTypeError, 415),
    (InvalidInputError, 422),
    (AuthenticationError, 401),
    (PermissionDeniedError, 403),
    (RateLimitedError, 429),
    (NotFoundError, 404),
    (ConflictError, 409),
    (WriteOutcomeUnknownError, 504),
    (StoreError, 503),
    (ConfigurationError, 500),
]


def route_of(scope: Mapping[str, Any]) -> str:
    """The route template that served a request (``/v1/users/{user_id}``), or
    ``unmatched``: what logs and metrics name instead of the path, which holds ids."""
    path = getattr(scope.get("route"), "path", None)
    return path if isinstance(path, str) else "unmatched"


def error_response(status: int, detail: ErrorDetail) -> JSONResponse:
    body = ErrorBody(error=detail).model_dump(exclude_none=True)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(body, status_code=status, headers=headers)


def _field_of(loc: tuple[Any, ...]) -> str:
    """The dotted field path; the first element names where it came from (body, query,
    header, path) and is dropped — a body field may itself be called ``query``."""
    if loc and loc[0] in ("body", "query", "header", "path"):
        loc = loc[1:]
    return ".".join(str(part) for part in loc)


async def _on_memmachine_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, MemMachineError)
    status = next((code for kind, code in _STATUS if isinstance(exc, kind)), 500)
    detail = ErrorDetail(code=exc.code, message=exc.message)
    if isinstance(exc, InvalidInputError):
        detail.field = exc.field
    if isinstance(exc, ConflictError):
        detail.current_version = exc.current_version
    if isinstance(exc, RateLimitedError):
        response = error_response(status, detail)
        response.headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after)))
        return response
    if isinstance(exc, WriteOutcomeUnknownError):
        log.warning(
            "store %s gave no answer to a write on %s %s: %s",
            exc.store,
            request.method,
            request.url.path,
            exc.message,
        )
        detail.message = (
            f"the {exc.store} store did not answer in time: the write may or may not have "
            "been applied; repeat it only if it is safe to apply twice"
        )
    elif isinstance(exc, StoreError):
        log.warning(
            "store %s failed on %s %s: %s",
            exc.store,
            request.method,
            route_of(request.scope),
            exc.message,
        )
        detail.message = f"the {exc.store} store is unavailable"
    elif status >= 500:
        log.error("%s on %s %s: %s", exc.code, request.method, route_of(request.scope), exc.message)
        detail.message = "internal error"
    return error_response(status, detail)


async def _on_validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    problems = []
    for error in exc.errors():
        if error.get("type") == "json_invalid":  # its loc is the character position
            position = error.get("loc", ("body", "?"))[-1]
            problems.append(
                {"field": "body", "message": f"not valid JSON (at character {position})"}
            )
            continue
        problems.append(
            {"field": _field_of(tuple(error.get("loc", ()))), "message": error.get("msg", "")}
        )
    field = str(problems[0]["field"]) if problems else ""
    reason = str(problems[0]["message"]) if problems else "invalid request"
    message = f"{field}: {reason}" if field else reason
    return error_response(
        422,
        ErrorDetail(code="invalid_input", message=message, field=field or None, errors=problems),
    )


#: What FastAPI says when a JSON body cannot even be decoded (bytes that are not UTF-8).
_UNPARSABLE_BODY = "There was an error parsing the body"


async def _on_http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400 and exc.detail == _UNPARSABLE_BODY:
        # bad input like any other: a 422 naming the body, as for JSON that does not parse
        return error_response(
            422,
            ErrorDetail(
                code="invalid_input",
                message="body: not valid JSON in UTF-8",
                field="body",
                errors=[{"field": "body", "message": "not valid JSON in UTF-8"}],
            ),
        )
    if exc.status_code == 400 and request.headers.get("content-type", "").startswith("multipart/"):
        # a multipart body that does not parse (an upload): bad input naming the body
        message = f"not valid multipart: {exc.detail}"
        return error_response(
            422,
            ErrorDetail(
                code="invalid_input",
                message=f"body: {message}",
                field="body",
                errors=[{"field": "body", "message": message}],
            ),
        )
    code = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}.get(
        exc.status_code, "http_error"
    )
    return error_response(exc.status_code, ErrorDetail(code=code, message=str(exc.detail)))


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, route_of(request.scope))
    return error_response(500, ErrorDetail(code="internal_error", message="internal error"))


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(MemMachineError, _on_memmachine_error)
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(StarletteHTTPException, _on_http_error)
    app.add_exception_handler(Exception, _on_unexpected)


async def memmachine_error_response(request: Request, exc: MemMachineError) -> JSONResponse:
    """The answer the error handlers give for ``exc``, for middleware that runs outside
    them."""
    return await _on_memmachine_error(request, exc)


async def http_error_response(request: Request, exc: Exception) -> JSONResponse:
    """The answer the error handlers give for an ``HTTPException`` (a body over the size
    limit...), for middleware that runs outside them."""
    return await _on_http_error(request, exc)
