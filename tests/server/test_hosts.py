"""Safe local mode: a server answering without a key answers only loopback host names and
origins (no DNS rebinding from a web page), over REST and MCP; the list is a setting; and a
server that once had keys never serves open again, not even after the last key is revoked."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from memmachine.adapters.sql.sql_key_store import SqlKeyStore
from memmachine.auth import issue_key
from memmachine.config import EmbeddingSettings
from memmachine_server.app import create_app
from memmachine_server.hosts import mcp_transport_security
from tests.server.conftest import AppFactory, make_settings
from tests.server.test_bad_input import error_of

NO_EMBEDDER = EmbeddingSettings(provider="none")
MCP_HEADERS = {"accept": "application/json, text/event-stream"}
MCP_LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}


def add(app: TestClient, user: str, text: str, **headers: str) -> Any:
    body = {"user_id": user, "session_id": "s", "messages": [{"content": text}]}
    return app.post("/v1/memories", json=body, headers=headers)


def stored(app: TestClient, user: str, **headers: str) -> list[str]:
    listed = app.get("/v1/memories", params={"user_id": user}, headers=headers)
    assert listed.status_code == 200, listed.text
    return [episode["content"] for episode in listed.json()["episodes"]]


@pytest.fixture
def local(app_factory: AppFactory) -> TestClient:
    """A server as ``memmachine serve`` starts by default: loopback, no key, open."""
    return app_factory(embedding=NO_EMBEDDER)


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1:8080", "[::1]:8080", "LOCALHOST:1"])
def test_an_open_server_answers_its_loopback_names(local: TestClient, host: str) -> None:
    assert add(local, "ana", f"via {host}", host=host).status_code == 201
    assert stored(local, "ana", host=host) == [f"via {host}"]


@pytest.mark.parametrize(
    "host", ["attacker.example", "attacker.example:8080", "127.0.0.1.nip.io", "10.0.0.5"]
)
def test_an_open_server_refuses_a_foreign_host_on_every_interface(
    local: TestClient, host: str
) -> None:
    error = error_of(add(local, "ana", "rebound", host=host), 421)
    assert error["code"] == "host_not_allowed"
    assert "MEMMACHINE_ALLOWED_HOSTS" in error["message"]
    assert error_of(local.get("/health", headers={"host": host}), 421)
    mcp = local.post("/mcp", json=MCP_LIST, headers={**MCP_HEADERS, "host": host})
    assert mcp.status_code == 421
    assert stored(local, "ana", host="localhost") == []


def test_an_open_server_refuses_pages_of_foreign_origins(local: TestClient) -> None:
    page = {"host": "127.0.0.1:8080", "origin": "http://attacker.example"}
    assert error_of(add(local, "ana", "cross-site", **page), 403)["code"] == "origin_not_allowed"
    mcp = local.post("/mcp", json=MCP_LIST, headers={**MCP_HEADERS, **page})
    assert mcp.status_code == 403
    assert error_of(add(local, "ana", "from a file", origin="null"), 403)
    own = {"host": "localhost:8080", "origin": "http://localhost:3000"}
    assert add(local, "ana", "from a local page", **own).status_code == 201
    assert stored(local, "ana") == ["from a local page"]


def test_the_mcp_transport_checks_hosts_itself_too(local: TestClient) -> None:
    state = local.app.state.memmachine  # type: ignore[attr-defined]
    security = mcp_transport_security(state.settings, state.keyring)
    assert security.enable_dns_rebinding_protection is True
    assert "localhost:*" in security.allowed_hosts
    assert "attacker.example:*" not in security.allowed_hosts
    listed = local.post("/mcp", json=MCP_LIST, headers={**MCP_HEADERS, "host": "localhost"})
    assert listed.status_code == 200, listed.text


def test_the_allowed_hosts_are_a_setting(app_factory: AppFactory) -> None:
    app = app_factory(embedding=NO_EMBEDDER, allowed_hosts="memory.internal, Other.Internal")
    assert add(app, "ana", "named host", host="memory.internal:8080").status_code == 201
    assert add(app, "ana", "other host", host="other.internal").status_code == 201
    assert error_of(add(app, "ana", "not listed", host="localhost"), 421)
    anything = app_factory(embedding=NO_EMBEDDER, allowed_hosts="*")
    assert add(anything, "ana", "any host", host="attacker.example").status_code == 201


def test_a_server_that_requires_keys_answers_any_host(app_factory: AppFactory) -> None:
    app = app_factory(embedding=NO_EMBEDDER, api_keys="host-key=acme")
    key = {"authorization": "Bearer host-key"}
    assert add(app, "ana", "behind a proxy", host="memory.example.com", **key).status_code == 201
    assert error_of(add(app, "ana", "no key", host="memory.example.com"), 401)


def test_revoking_the_last_key_does_not_reopen_the_server(tmp_path: Path) -> None:
    data_dir = tmp_path / "latched"
    settings = make_settings(data_dir, embedding=NO_EMBEDDER, key_refresh_seconds=0.05)
    keys_url = f"sqlite+aiosqlite:///{data_dir / 'profile.db'}"
    issued = issue_key("acme")
    key = {"authorization": f"Bearer {issued.token}"}

    async def in_store(action: str) -> None:
        async with SqlKeyStore(keys_url) as store:
            if action == "create":
                await store.create(issued.record, issued.secret_hash)
            else:
                await store.revoke(issued.record.key_id)

    with TestClient(
        create_app(settings), raise_server_exceptions=False, base_url="http://localhost"
    ) as app:
        assert add(app, "ana", "open at first").status_code == 201
        asyncio.run(in_store("create"))  # what `memmachine keys create` does
        assert add(app, "ana", "with the key", **key).status_code == 201
        error_of(add(app, "ana", "without a key"), 401)

        asyncio.run(in_store("revoke"))  # `memmachine keys revoke`: no active key is left
        deadline = time.monotonic() + 30
        while add(app, "ana", "revoked key", **key).status_code != 401:
            assert time.monotonic() < deadline, "the revoked key was still accepted"
            time.sleep(0.05)
        error_of(add(app, "ana", "still no key"), 401)
        # once keyed, a foreign Host is no rebinding risk: it meets the key check instead
        error_of(add(app, "ana", "foreign", host="attacker.example"), 401)

    # Restarted over the same key store, with only a revoked key in it: still closed.
    with TestClient(
        create_app(settings), raise_server_exceptions=False, base_url="http://localhost"
    ) as app:
        error_of(add(app, "ana", "after a restart"), 401)
