"""Custom memory types over REST: registered through ``MEMMACHINE_MEMORY_TYPES`` (the setting)
and served at /v1/memory-types on a real app with embedded stores, scoped by API key."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from memmachine.errors import ConfigurationError
from memmachine_server.app import create_app
from tests.conftest import REPO_ROOT
from tests.server.conftest import LOCAL, AppFactory, make_settings

READING_LIST = "examples.custom_memory_type:ReadingList"
SESSION_NOTES = "tests.unit.memory.test_memory_types:SessionNotes"
TYPES = [READING_LIST, SESSION_NOTES]
ACME = {"Authorization": "Bearer acme-key"}
GLOBEX = {"Authorization": "Bearer globex-key"}
ADMIN_KEY = "types-admin-key"


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """One app for the module; tests keep apart by user id."""
    settings = make_settings(
        tmp_path_factory.mktemp("custom"),
        memory_types=TYPES,
        api_keys="acme-key=acme,globex-key=globex",
        admin_key=ADMIN_KEY,
    )
    with TestClient(create_app(settings), raise_server_exceptions=False, base_url=LOCAL) as client:
        yield client


def store(api: TestClient, name: str, body: dict[str, Any], headers: dict[str, str] = ACME) -> Any:
    return api.post(f"/v1/memory-types/{name}/store", json=body, headers=headers)


def retrieve(
    api: TestClient, name: str, body: dict[str, Any], headers: dict[str, str] = ACME
) -> Any:
    return api.post(f"/v1/memory-types/{name}/retrieve", json=body, headers=headers)


def titles(response: Any) -> list[str]:
    assert response.status_code == 200, response.text
    return [book["title"] for book in response.json()["result"]]


def test_the_listing_shows_each_type_with_its_schemas(api: TestClient) -> None:
    response = api.get("/v1/memory-types", headers=ACME)

    assert response.status_code == 200
    types = {item["name"]: item for item in response.json()["types"]}
    assert sorted(types) == ["reading_list", "session_notes"]
    reading = types["reading_list"]
    assert "reading list" in reading["description"]
    assert reading["store_schema"]["required"] == ["title"]
    assert set(reading["retrieve_schema"]["properties"]) >= {"status", "author", "text"}
    assert reading["partition_by"] == []
    assert types["session_notes"]["partition_by"] == ["session_id"]


def test_a_stored_book_is_retrieved_by_its_user(api: TestClient) -> None:
    added = store(
        api,
        "reading_list",
        {"user_id": "ana", "input": {"title": "Dune", "author": "Frank Herbert"}},
    )
    assert added.status_code == 200, added.text
    assert added.json()["type"] == "reading_list"
    assert added.json()["result"]["status"] == "to_read"
    store(api, "reading_list", {"user_id": "ana", "input": {"title": "Emma", "status": "done"}})

    assert titles(retrieve(api, "reading_list", {"user_id": "ana"})) == ["Emma", "Dune"]
    done = retrieve(api, "reading_list", {"user_id": "ana", "input": {"status": "done"}})
    assert titles(done) == ["Emma"]
    # The user may come from the X-User-ID header like everywhere else.
    by_header = api.post(
        "/v1/memory-types/reading_list/retrieve",
        json={"input": {"text": "herbert"}},
        headers={**ACME, "X-User-ID": "ana"},
    )
    assert titles(by_header) == ["Dune"]


def test_another_user_or_tenant_sees_none_of_it(api: TestClient) -> None:
    store(api, "reading_list", {"user_id": "zoe", "input": {"title": "Private Diary Notes"}})

    assert titles(retrieve(api, "reading_list", {"user_id": "max"})) == []
    other_tenant = retrieve(api, "reading_list", {"user_id": "zoe"}, headers=GLOBEX)
    assert titles(other_tenant) == []
    assert titles(retrieve(api, "reading_list", {"user_id": "zoe"})) == ["Private Diary Notes"]


def test_an_unknown_type_is_a_404_naming_it(api: TestClient) -> None:
    for action in ("store", "retrieve"):
        response = api.post(
            f"/v1/memory-types/diary/{action}", json={"user_id": "ana"}, headers=ACME
        )
        assert response.status_code == 404
        error = response.json()["error"]
        assert error["code"] == "not_found"
        assert "'diary'" in error["message"]


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"author": "nobody"}, "input.title"),
        ({"title": "   "}, "input.title"),
        ({"title": "Dune", "status": "abandoned"}, "input.status"),
        ({"title": "Dune", "colour": "blue"}, "input.colour"),
    ],
)
def test_invalid_input_is_a_422_naming_the_field_and_stores_nothing(
    api: TestClient, payload: dict[str, Any], field: str
) -> None:
    response = store(api, "reading_list", {"user_id": "ivy", "input": payload})

    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "invalid_input"
    assert error["field"] == field
    assert "Traceback" not in response.text
    assert titles(retrieve(api, "reading_list", {"user_id": "ivy"})) == []


def test_a_retrieve_query_is_validated_too(api: TestClient) -> None:
    response = retrieve(api, "reading_list", {"user_id": "ana", "input": {"limit": 0}})
    assert response.status_code == 422
    assert response.json()["error"]["field"] == "input.limit"


def test_a_session_partitioned_type_needs_the_session(api: TestClient) -> None:
    missing = store(api, "session_notes", {"user_id": "ana", "input": {"key": "k", "text": "x"}})
    assert missing.status_code == 422
    assert missing.json()["error"]["field"] == "session_id"

    for session, text in (("s1", "first"), ("s2", "second")):
        body = {"user_id": "ana", "session_id": session, "input": {"key": "k", "text": text}}
        assert store(api, "session_notes", body).status_code == 200
    found = retrieve(api, "session_notes", {"user_id": "ana", "session_id": "s2"})
    assert found.json()["result"] == ["second"]


def test_without_a_key_nothing_is_served(api: TestClient) -> None:
    assert api.get("/v1/memory-types").status_code == 401
    assert store(api, "reading_list", {"user_id": "ana"}, headers={}).status_code == 401


def test_a_read_only_key_retrieves_but_cannot_store(api: TestClient) -> None:
    created = api.post(
        "/v1/admin/keys",
        json={"tenant": "acme", "permissions": ["read"]},
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
    )
    assert created.status_code == 201, created.text
    reader = {"Authorization": f"Bearer {created.json()['key']}"}
    store(api, "reading_list", {"user_id": "ro", "input": {"title": "Dune"}})

    denied = store(api, "reading_list", {"user_id": "ro", "input": {"title": "Emma"}}, reader)
    assert denied.status_code == 403
    assert titles(retrieve(api, "reading_list", {"user_id": "ro"}, reader)) == ["Dune"]
    assert api.get("/v1/memory-types", headers=reader).status_code == 200


def test_forgetting_the_user_removes_their_records(api: TestClient) -> None:
    store(api, "reading_list", {"user_id": "leo", "input": {"title": "Ulysses"}})
    store(api, "reading_list", {"user_id": "mia", "input": {"title": "Middlemarch"}})

    assert api.delete("/v1/users/leo", headers=ACME).status_code == 200

    assert titles(retrieve(api, "reading_list", {"user_id": "leo"})) == []
    assert titles(retrieve(api, "reading_list", {"user_id": "mia"})) == ["Middlemarch"]


@pytest.mark.parametrize("where", ["sqlite", "redis"])
def test_records_survive_a_restart(tmp_path: Path, where: str) -> None:
    # redis: the working store's server, here the embedded one in the data dir.
    settings = make_settings(
        tmp_path / "data", memory_types=[READING_LIST], memory_types_store=where
    )
    with TestClient(create_app(settings), base_url=LOCAL) as first:
        stored = store(first, "reading_list", {"user_id": "ana", "input": {"title": "Dune"}}, {})
        assert stored.status_code == 200
    with TestClient(create_app(settings), base_url=LOCAL) as second:
        assert titles(retrieve(second, "reading_list", {"user_id": "ana"}, {})) == ["Dune"]
    assert (tmp_path / "data" / "memory_types.db").exists() == (where == "sqlite")


def test_a_bad_registration_stops_the_server_naming_it(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data", memory_types=["examples.nowhere:Thing"])
    with (
        pytest.raises(ConfigurationError) as caught,
        TestClient(create_app(settings), base_url=LOCAL),
    ):
        pass
    assert "MEMMACHINE_MEMORY_TYPES entry 'examples.nowhere:Thing'" in caught.value.message


def test_with_no_types_the_listing_is_empty(app_factory: AppFactory) -> None:
    api = app_factory()
    assert api.get("/v1/memory-types").json() == {"types": []}
    assert store(api, "reading_list", {"user_id": "ana"}, {}).status_code == 404


def test_the_example_runs_and_recalls_after_a_restart() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "examples.custom_memory_type"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "recalled 'The Left Hand of Darkness' by Ursula K. Le Guin (to_read)" in done.stdout
    assert done.stdout.rstrip().endswith("RESULT custom_memory_type: ok")
