"""Authentication over REST: the three MEMMACHINE_AUTH modes, 401 / 403 / 429, the admin
routes, revocation, and keys stored as hashes only."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from memmachine.adapters.sql.sql_key_store import SqlKeyStore
from memmachine.auth import issue_key, parse_key
from memmachine.config import EmbeddingSettings, Settings
from memmachine_server.app import create_app
from memmachine_server.keyring import is_loopback
from tests.server.conftest import LOCAL, AppFactory, make_settings
from tests.server.test_bad_input import error_of

ADMIN = "test-admin-key-0123456789"
NO_EMBEDDER = EmbeddingSettings(provider="none")


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def new_key(app: TestClient, tenant: str, **fields: Any) -> dict[str, Any]:
    """Create a key through the admin route; the response (with ``key``)."""
    response = app.post("/v1/admin/keys", json={"tenant": tenant, **fields}, headers=bearer(ADMIN))
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def remember(app: TestClient, key: str, user: str, text: str) -> Any:
    body = {"user_id": user, "session_id": "s1", "messages": [{"content": text}]}
    return app.post("/v1/memories", json=body, headers=bearer(key))


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """One app with MEMMACHINE_ADMIN_KEY set (so keys are required), shared by the module;
    tests use their own tenants."""
    settings = make_settings(tmp_path_factory.mktemp("auth"), admin_key=ADMIN)
    with TestClient(create_app(settings), raise_server_exceptions=False, base_url=LOCAL) as client:
        yield client


# --------------------------------------------------------------------------- modes


def test_auto_mode_on_loopback_without_keys_is_open_and_warns(
    app_factory: AppFactory, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="memmachine"):
        app = app_factory(embedding=NO_EMBEDDER)
    assert remember(app, "", "ana", "open mode works").status_code == 201
    listed = app.get("/v1/memories", params={"user_id": "ana"})
    assert listed.json()["total"] == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("OPEN without authentication on loopback" in w for w in warnings), warnings


def test_off_mode_is_open_anywhere_and_warns_at_start(
    app_factory: AppFactory, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="memmachine"):
        app = app_factory(embedding=NO_EMBEDDER, auth="off", host="0.0.0.0")
    assert remember(app, "", "ana", "served open on purpose").status_code == 201
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("MEMMACHINE_AUTH=off" in w for w in warnings), warnings


def test_auto_mode_on_a_public_address_without_keys_refuses_every_request(
    app_factory: AppFactory,
) -> None:
    app = app_factory(embedding=NO_EMBEDDER, host="0.0.0.0")
    error = error_of(remember(app, "", "ana", "must not be stored"), 401)
    assert "API key is required" in error["message"]
    assert app.get("/health").status_code == 200


def test_on_mode_demands_a_key_even_on_loopback(app_factory: AppFactory) -> None:
    app = app_factory(embedding=NO_EMBEDDER, auth="on")
    response = remember(app, "", "ana", "no key")
    error_of(response, 401)
    assert response.headers["WWW-Authenticate"] == "Bearer"
    assert app.get("/health").status_code == 200


def test_auto_mode_requires_keys_once_a_key_is_created_while_running(
    app_factory: AppFactory, tmp_path: Path
) -> None:
    """A key written to the store by another process (what ``memmachine keys create``
    does) works at once, and from then on a request without a key is refused."""
    data_dir = tmp_path / "live"
    app = app_factory(embedding=NO_EMBEDDER, data_dir=data_dir)
    assert remember(app, "", "ana", "still open").status_code == 201

    issued = issue_key("acme")

    async def create() -> None:
        async with SqlKeyStore(f"sqlite+aiosqlite:///{data_dir / 'profile.db'}") as store:
            await store.create(issued.record, issued.secret_hash)

    asyncio.run(create())
    assert remember(app, issued.token, "ana", "with the new key").status_code == 201
    error_of(remember(app, "", "ana", "no key any more"), 401)
    mine = app.get("/v1/memories", params={"user_id": "ana"}, headers=bearer(issued.token))
    assert [e["content"] for e in mine.json()["episodes"]] == ["with the new key"]


# --------------------------------------------------------------------------- keys


def test_a_created_key_reaches_only_its_tenant_and_lists_without_secrets(
    keyed: TestClient,
) -> None:
    created = new_key(keyed, "lister", name="ci bot")
    assert created["key"].startswith("mm_")
    assert created["permissions"] == ["read", "write"]
    assert remember(keyed, created["key"], "ana", "hello").status_code == 201

    listed = keyed.get("/v1/admin/keys", params={"tenant": "lister"}, headers=bearer(ADMIN))
    assert listed.status_code == 200
    (entry,) = listed.json()["keys"]
    assert entry["id"] == created["id"]
    assert entry["name"] == "ci bot"
    assert "key" not in entry
    assert parse_key(created["key"]) is not None
    secret = parse_key(created["key"]).secret  # type: ignore[union-attr]
    assert secret not in listed.text


def test_missing_unknown_and_malformed_keys_are_401_without_details(keyed: TestClient) -> None:
    assert error_of(remember(keyed, "", "ana", "x"), 401)["code"] == "unauthenticated"
    real = new_key(keyed, "probe")["key"]
    tampered = real[:-4] + ("AAAA" if not real.endswith("AAAA") else "BBBB")
    for key in ("nope", tampered, "mm_0123456789abcdef_secret"):
        error = error_of(remember(keyed, key, "ana", "x"), 401)
        assert error["message"] == "unknown or revoked API key"


def test_revoked_key_gets_401_and_its_data_stays(keyed: TestClient) -> None:
    created = new_key(keyed, "revokee")
    key = created["key"]
    assert remember(keyed, key, "ana", "before revocation").status_code == 201
    revoked = keyed.delete(f"/v1/admin/keys/{created['id']}", headers=bearer(ADMIN))
    assert revoked.status_code == 200
    assert revoked.json()["revoked_at"] is not None
    error_of(keyed.get("/v1/memories", params={"user_id": "ana"}, headers=bearer(key)), 401)

    other = new_key(keyed, "revokee")["key"]
    kept = keyed.get("/v1/memories", params={"user_id": "ana"}, headers=bearer(other))
    assert [e["content"] for e in kept.json()["episodes"]] == ["before revocation"]
    error_of(keyed.delete("/v1/admin/keys/ffffffffffffffff", headers=bearer(ADMIN)), 404)


def test_read_only_key_reads_but_every_write_is_403(keyed: TestClient) -> None:
    writer = new_key(keyed, "ro-tenant")["key"]
    reader = new_key(keyed, "ro-tenant", permissions=["read"])["key"]
    assert remember(keyed, writer, "ana", "written by the writer").status_code == 201

    error = error_of(remember(keyed, reader, "ana", "by the reader"), 403)
    assert error["code"] == "permission_denied"
    assert "write permission" in error["message"]
    h = bearer(reader)
    user = {"user_id": "ana"}
    error_of(keyed.post("/v1/profile", json={**user, "facts": []}, headers=h), 403)
    error_of(keyed.delete("/v1/users/ana", headers=h), 403)
    error_of(keyed.delete("/v1/sessions/s1", params=user, headers=h), 403)
    error_of(keyed.post("/v1/sessions/s1/compact", params=user, headers=h), 403)
    forget = {
        "user_id": "ana",
        "tool_call": {
            "id": "c1",
            "type": "function",
            "function": {"name": "forget", "arguments": '{"scope": "user", "session_id": null}'},
        },
    }
    error_of(keyed.post("/v1/tools/execute", json=forget, headers=h), 403)

    listed = keyed.get("/v1/memories", params=user, headers=h)
    assert [e["content"] for e in listed.json()["episodes"]] == ["written by the writer"]
    recall = {
        "user_id": "ana",
        "tool_call": {
            "id": "c2",
            "type": "function",
            "function": {"name": "recall", "arguments": '{"query": "writer"}'},
        },
    }
    assert keyed.post("/v1/tools/execute", json=recall, headers=h).status_code == 200


def test_a_key_without_read_permission_cannot_read(keyed: TestClient) -> None:
    write_only = new_key(keyed, "wo-tenant", permissions=["write"])["key"]
    assert remember(keyed, write_only, "ana", "drop box").status_code == 201
    response = keyed.get("/v1/memories", params={"user_id": "ana"}, headers=bearer(write_only))
    assert "read permission" in error_of(response, 403)["message"]


def test_admin_key_manages_keys_but_reads_no_memories(keyed: TestClient) -> None:
    response = keyed.get("/v1/memories", params={"user_id": "ana"}, headers=bearer(ADMIN))
    error_of(response, 403)
    response = keyed.post("/v1/admin/keys", json={}, headers=bearer(ADMIN))
    assert error_of(response, 422)["field"] == "tenant"
    response = keyed.post("/v1/admin/keys", json={"tenant": "a b"}, headers=bearer(ADMIN))
    assert error_of(response, 422)["field"] == "tenant"
    response = keyed.post(
        "/v1/admin/keys", json={"tenant": "t", "permissions": ["root"]}, headers=bearer(ADMIN)
    )
    assert error_of(response, 422)["field"].startswith("permissions")


def test_only_admins_manage_keys_and_a_tenant_admin_only_its_tenant(keyed: TestClient) -> None:
    plain = new_key(keyed, "tenant-x")["key"]
    error = error_of(keyed.get("/v1/admin/keys", headers=bearer(plain)), 403)
    assert "admin" in error["message"]
    error_of(keyed.get("/v1/admin/keys"), 401)

    boss = new_key(keyed, "tenant-x", permissions=["read", "write", "admin"])["key"]
    other_tenant = new_key(keyed, "tenant-y")
    made = keyed.post("/v1/admin/keys", json={"name": "by boss"}, headers=bearer(boss))
    assert made.status_code == 201
    assert made.json()["tenant"] == "tenant-x"
    error_of(keyed.post("/v1/admin/keys", json={"tenant": "tenant-y"}, headers=bearer(boss)), 403)
    listed = keyed.get("/v1/admin/keys", headers=bearer(boss)).json()["keys"]
    assert {entry["tenant"] for entry in listed} == {"tenant-x"}
    error_of(keyed.delete(f"/v1/admin/keys/{other_tenant['id']}", headers=bearer(boss)), 404)
    still = keyed.get("/v1/memories", params={"user_id": "u"}, headers=bearer(other_tenant["key"]))
    assert still.status_code == 200


def test_rate_limit_gives_429_with_retry_after_per_key(keyed: TestClient) -> None:
    limited = new_key(keyed, "busy", rate_limit_per_minute=2)["key"]
    free = new_key(keyed, "busy", rate_limit_per_minute=0)["key"]
    params = {"user_id": "ana"}
    for _ in range(2):
        assert keyed.get("/v1/memories", params=params, headers=bearer(limited)).status_code == 200
    response = keyed.get("/v1/memories", params=params, headers=bearer(limited))
    assert error_of(response, 429)["code"] == "rate_limited"
    assert int(response.headers["Retry-After"]) >= 1
    for _ in range(5):
        assert keyed.get("/v1/memories", params=params, headers=bearer(free)).status_code == 200


def test_default_rate_limit_covers_static_keys(app_factory: AppFactory) -> None:
    app = app_factory(embedding=NO_EMBEDDER, api_keys="k1=t1", rate_limit_per_minute=1)
    assert app.get("/v1/memories", params={"user_id": "u"}, headers=bearer("k1")).status_code == 200
    response = app.get("/v1/memories", params={"user_id": "u"}, headers=bearer("k1"))
    error_of(response, 429)
    assert "Retry-After" in response.headers


def test_keys_are_stored_as_hashes_only(app_factory: AppFactory, tmp_path: Path) -> None:
    data_dir = tmp_path / "hashed"
    app = app_factory(embedding=NO_EMBEDDER, data_dir=data_dir, admin_key=ADMIN)
    created = new_key(app, "vault", name="hash me")
    token = created["key"]
    parsed = parse_key(token)
    assert parsed is not None

    with sqlite3.connect(data_dir / "profile.db") as db:
        rows = db.execute("SELECT * FROM api_keys").fetchall()
        columns = [c[1] for c in db.execute("PRAGMA table_info(api_keys)")]
    assert len(rows) == 1
    dump = " ".join(str(value) for value in rows[0])
    assert token not in dump
    assert parsed.secret not in dump
    stored = dict(zip(columns, rows[0], strict=True))
    assert stored["secret_hash"] == hashlib.sha256(parsed.secret.encode()).hexdigest()
    assert stored["tenant"] == "vault"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.1.2.3", False),
        ("example.com", False),
    ],
)
def test_only_loopback_bind_addresses_count_as_local(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_an_unknown_auth_mode_is_a_settings_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMMACHINE_AUTH", "sometimes")
    with pytest.raises(ValidationError, match="auth"):
        Settings()
