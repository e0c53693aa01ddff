"""Retention policies set through ``PUT /v1/admin/retention`` outlive a restart of the
server (kept in the profile store's database, SQLite or PostgreSQL); the settings file's
policies stay the defaults of the tenants nobody set policies for."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memmachine.config import RetentionPolicy, RetentionSettings
from memmachine.models import NewMessage, Scope
from tests.conftest import temporary_postgres_database
from tests.fakes.clock import ManualClock
from tests.integration.test_expiry import SECRET, manager_of, start

ADMIN_KEY = "adm-secret-key-0123456789"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


@pytest.fixture(params=["sqlite", "postgresql"])
def profile_url(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """Settings overrides putting the profile database on SQLite (the data dir) or on a
    PostgreSQL database of the test's own."""
    if request.param == "sqlite":
        yield {}
    else:
        admin_url = str(request.getfixturevalue("postgres_admin_url"))
        with temporary_postgres_database(admin_url) as url:
            yield {"profile_store_url": url}


def _settings_file(*policies: RetentionPolicy) -> RetentionSettings:
    return RetentionSettings(sweep_interval_seconds=0, policies=list(policies))


def test_a_policy_put_through_the_admin_route_outlives_a_restart(
    tmp_path: Path, profile_url: dict[str, Any]
) -> None:
    data_dir = (tmp_path / "data").resolve()
    clock = ManualClock()
    from_file = RetentionPolicy(tenant="default", episodes_max_age_days=365)
    options: dict[str, Any] = {"admin_key": ADMIN_KEY, **profile_url}
    api = start(data_dir, clock, retention=_settings_file(from_file), **options)
    try:
        put = api.put(
            "/v1/admin/retention",
            json={"policies": [{"tenant": "default", "episodes_max_age_days": 30}]},
            headers=ADMIN,
        )
        assert put.status_code == 200, put.text
    finally:
        api.__exit__(None, None, None)

    # Restarted with the same settings file plus a policy for a tenant nobody PUT.
    other = RetentionPolicy(tenant="initech", working_max_age_days=2)
    api = start(data_dir, clock, retention=_settings_file(from_file, other), **options)
    try:
        shown = api.get("/v1/admin/retention", headers=ADMIN).json()["policies"]
        by_tenant = {policy["tenant"]: policy for policy in shown}
        assert by_tenant["default"]["episodes_max_age_days"] == 30  # the PUT one, not 365
        assert by_tenant["initech"]["working_max_age_days"] == 2  # the file's default
        assert len(shown) == 2
        # The kept policy is the one the sweep applies.
        manager = manager_of(api)
        user = Scope(user_id="u-restart", session_id="s1")
        api.portal.call(manager.add_messages, user, [NewMessage(content=SECRET)])  # type: ignore[union-attr]
        clock.advance(31 * 86_400)
        swept = api.post("/v1/admin/retention/sweep", headers=ADMIN)
        assert swept.status_code == 200, swept.text
        assert swept.json()["episodes_aged_out"] == 1
        _, total = api.portal.call(manager.list_episodes, user)  # type: ignore[union-attr]
        assert total == 0
    finally:
        api.__exit__(None, None, None)


def test_a_tenant_admin_replaces_only_its_own_policies_and_they_are_kept(
    tmp_path: Path,
) -> None:
    data_dir = (tmp_path / "data").resolve()
    clock = ManualClock()
    from_file = [
        RetentionPolicy(tenant="acme", episodes_max_age_days=365),
        RetentionPolicy(tenant="globex", episodes_max_age_days=365),
    ]
    options: dict[str, Any] = {"admin_key": ADMIN_KEY}
    api = start(data_dir, clock, retention=_settings_file(*from_file), **options)
    try:
        created = api.post(
            "/v1/admin/keys",
            json={"tenant": "acme", "permissions": ["read", "write", "admin"]},
            headers=ADMIN,
        )
        assert created.status_code == 201, created.text
        put = api.put(
            "/v1/admin/retention",
            json={"policies": []},
            headers={"Authorization": f"Bearer {created.json()['key']}"},
        )
        assert put.status_code == 200, put.text
        assert put.json()["policies"] == []
    finally:
        api.__exit__(None, None, None)
    api = start(data_dir, clock, retention=_settings_file(*from_file), **options)
    try:
        shown = api.get("/v1/admin/retention", headers=ADMIN).json()["policies"]
        # acme chose "no policy", which a restart keeps; globex keeps the file's.
        assert [(p["tenant"], p["episodes_max_age_days"]) for p in shown] == [("globex", 365)]
    finally:
        api.__exit__(None, None, None)
