"""403 and 429 as the real app produces them (read-only and rate-limited API keys), seen
through the SDK as PermissionDeniedError and RateLimitedError."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from memmachine_sdk import Client, PermissionDeniedError, RateLimitedError, RetryPolicy
from memmachine_server.app import create_app
from tests.server.conftest import LOCAL, make_settings

ADMIN = "sdk-admin-key"


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    settings = make_settings(tmp_path_factory.mktemp("keys"), admin_key=ADMIN)
    with TestClient(create_app(settings), raise_server_exceptions=False, base_url=LOCAL) as client:
        yield client


def new_key(http: Any, **fields: Any) -> str:
    response = http.post(
        "/v1/admin/keys",
        json={"tenant": "sdk-tenant", **fields},
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert response.status_code == 201, response.text
    key: str = response.json()["key"]
    return key


def test_a_read_only_key_reads_but_writing_is_permission_denied(http: Any) -> None:
    with Client(http_client=http, api_key=new_key(http, permissions=["read"])) as mm:
        memory = mm.memory(user_id="sdk-reader", session_id="s")
        assert memory.search("anything").episodic == []
        with pytest.raises(PermissionDeniedError) as err:
            memory.add("not allowed")
        assert (err.value.status, err.value.code) == (403, "permission_denied")
        with pytest.raises(PermissionDeniedError):
            memory.state.set({"x": 1})
    with Client(http_client=http, api_key=new_key(http)) as writer:
        # nothing was written on the refused calls
        memory = writer.memory(user_id="sdk-reader", session_id="s")
        assert memory.episodes().total == 0
        assert memory.state.get().version == 0


def test_a_rate_limited_key_gets_rate_limited_with_retry_after(http: Any) -> None:
    key = new_key(http, rate_limit_per_minute=1)
    # a minute's wait is over the policy's limit: raised at once instead of waited for
    policy = RetryPolicy(max_retries=3, max_retry_after=5)
    with Client(http_client=http, api_key=key, retry=policy) as mm:
        memory = mm.memory(user_id="sdk-limited")

        def read_until_refused() -> None:
            for _ in range(20):  # whatever burst the bucket allows, it runs out
                memory.profile.get()

        with pytest.raises(RateLimitedError) as err:
            read_until_refused()
    assert (err.value.status, err.value.code) == (429, "rate_limited")
    assert err.value.retry_after is not None
    assert 5 < err.value.retry_after <= 60
