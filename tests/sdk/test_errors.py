"""Every error a user can meet is a typed MemMachineError with status, code, message and
field — parsed from the server's own error responses."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from memmachine.errors import (
    InvalidInputError as CoreInvalidInput,
)
from memmachine.errors import (
    PermissionDeniedError as CorePermissionDenied,
)
from memmachine.errors import (
    RateLimitedError as CoreRateLimited,
)
from memmachine.errors import (
    StoreUnavailableError as CoreStoreUnavailable,
)
from memmachine_sdk import (
    BadRequestError,
    Client,
    ConflictError,
    InvalidInputError,
    MemMachineAPIError,
    MemMachineError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RateLimitedError,
    ServerError,
    ServiceUnavailableError,
    UnauthorizedError,
)
from memmachine_server.errors import install_error_handlers
from tests.sdk.conftest import Reply, ScriptedServer
from tests.server.conftest import LOCAL


@pytest.fixture(scope="module")
def failing_app() -> Iterator[TestClient]:
    """The server's real error mapping over routes that fail the way auth, rate limiting
    and stores fail."""
    app = FastAPI()
    install_error_handlers(app)

    @app.post("/v1/memories")
    async def read_only_key() -> None:
        raise CorePermissionDenied("this key may only read")

    @app.post("/v1/memories/search")
    async def too_many() -> None:
        raise CoreRateLimited("rate limit of 60 requests per minute exceeded", retry_after=2.2)

    @app.get("/v1/profile")
    async def store_down() -> None:
        raise CoreStoreUnavailable("connection refused", store="profile")

    @app.post("/v1/profile")
    async def bad_fact() -> None:
        raise CoreInvalidInput("value reads as an instruction", field="facts.0.value")

    with TestClient(app, raise_server_exceptions=False, base_url=LOCAL) as http:
        yield http


def sdk(http: TestClient) -> Client:
    transport: Any = http  # a TestClient is an httpx.Client on the app
    return Client(http_client=transport, max_retries=0)


def test_403_is_permission_denied(failing_app: TestClient) -> None:
    with pytest.raises(PermissionDeniedError) as err:
        sdk(failing_app).add(["hi"], user_id="u", session_id="s")
    assert (err.value.status, err.value.code) == (403, "permission_denied")
    assert err.value.message == "this key may only read"
    assert not isinstance(err.value, UnauthorizedError)


def test_429_is_rate_limited_with_retry_after(failing_app: TestClient) -> None:
    with pytest.raises(RateLimitedError) as err:
        sdk(failing_app).memory(user_id="u").search("anything")
    assert (err.value.status, err.value.code) == (429, "rate_limited")
    assert err.value.retry_after == 3.0  # the header rounds up to whole seconds
    assert "per minute" in err.value.message


def test_503_is_service_unavailable_and_names_the_store(failing_app: TestClient) -> None:
    with pytest.raises(ServiceUnavailableError) as err:
        sdk(failing_app).get_profile(user_id="u")
    assert isinstance(err.value, ServerError)
    assert err.value.status == 503
    assert err.value.message == "the profile store is unavailable"


def test_422_names_the_field(failing_app: TestClient) -> None:
    with pytest.raises(InvalidInputError) as err:
        sdk(failing_app).set_profile([{"tag": "a", "feature": "b", "value": "c"}], user_id="u")
    assert (err.value.status, err.value.field) == (422, "facts.0.value")
    assert isinstance(err.value, BadRequestError)


@pytest.mark.parametrize(
    ("status", "kind", "code"),
    [
        (400, BadRequestError, "bad_request"),
        (401, UnauthorizedError, "unauthenticated"),
        (403, PermissionDeniedError, "permission_denied"),
        (404, NotFoundError, "not_found"),
        (409, ConflictError, "conflict"),
        (413, PayloadTooLargeError, "payload_too_large"),
        (422, InvalidInputError, "invalid_input"),
        (429, RateLimitedError, "rate_limited"),
        (500, ServerError, "internal_error"),
        (503, ServiceUnavailableError, "store_unavailable"),
        (418, MemMachineAPIError, "teapot"),
    ],
)
def test_each_status_has_its_error_class(
    scripted: ScriptedServer, status: int, kind: type[MemMachineAPIError], code: str
) -> None:
    body = {"error": {"code": code, "message": f"it went {status}", "field": "query"}}
    if status == 409:
        body["error"]["current_version"] = 4
    scripted.answer(Reply(status, body))
    with Client(scripted.url, max_retries=0) as mm, pytest.raises(kind) as err:
        mm.search("x", user_id="u")
    assert type(err.value) is kind
    assert isinstance(err.value, MemMachineError)
    assert (err.value.status, err.value.code, err.value.field) == (status, code, "query")
    assert err.value.message == f"it went {status}"
    assert str(err.value) == f"{status} {code}: it went {status}"
    if status == 409:
        assert err.value.current_version == 4


def test_a_non_json_error_page_is_still_typed(scripted: ScriptedServer) -> None:
    scripted.answer(Reply(502))  # e.g. a proxy's empty 502
    with Client(scripted.url, max_retries=0) as mm, pytest.raises(ServerError) as err:
        mm.health()
    assert (err.value.status, err.value.code) == (502, "http_error")


def test_an_unreadable_success_body_is_an_api_error(scripted: ScriptedServer) -> None:
    scripted.answer(Reply(200, {"not": "a health report"}))
    with Client(scripted.url, max_retries=0) as mm, pytest.raises(MemMachineAPIError) as err:
        mm.health()
    assert err.value.code == "invalid_response"
    assert "HealthResponse" in err.value.message


def test_bad_input_is_refused_before_sending(scripted: ScriptedServer) -> None:
    scripted.answer(Reply(201, {"session_id": "s", "episode_ids": []}))
    with Client(scripted.url) as mm:
        with pytest.raises(InvalidInputError) as err:
            mm.memory(user_id="u", session_id="s").search("x", top_k=0)
        assert err.value.field == "top_k"
        with pytest.raises(InvalidInputError) as err:
            mm.memory(user_id="not a valid id!")
        assert err.value.field == "user_id"
        with pytest.raises(InvalidInputError) as err:
            mm.memory(user_id="u").add("no session to add to")
        assert err.value.field == "session_id"
        with pytest.raises(InvalidInputError) as err:
            mm.memory(session_id="s")  # no user here nor on the client
        assert err.value.field == "user_id"
    assert scripted.seen == []


def test_transport_errors_are_not_leaked_raw() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadError("connection reset by peer", request=request)

    with (
        Client(
            "http://memmachine.test", transport=httpx.MockTransport(refuse), max_retries=0
        ) as mm,
        pytest.raises(MemMachineError) as err,
    ):
        mm.health()
    assert err.value.code == "connection_error"
    assert isinstance(err.value.__cause__, httpx.ReadError)
