"""Through the SDK, a key of tenant A never reaches tenant B's memories: the same user and
session ids under two tenants are two different people, and every id-addressed call on
B's data is a 404 for A."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from memmachine_sdk import Client, NotFoundError
from memmachine_server.app import create_app
from tests.server.conftest import LOCAL, make_settings

ADMIN = "sdk-isolation-admin"


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    settings = make_settings(tmp_path_factory.mktemp("tenants"), admin_key=ADMIN)
    with TestClient(create_app(settings), raise_server_exceptions=False, base_url=LOCAL) as client:
        yield client


def key_of(http: Any, tenant: str) -> str:
    response = http.post(
        "/v1/admin/keys", json={"tenant": tenant}, headers={"Authorization": f"Bearer {ADMIN}"}
    )
    assert response.status_code == 201, response.text
    key: str = response.json()["key"]
    return key


def test_tenant_a_cannot_read_search_infer_or_delete_tenant_b(http: Any) -> None:
    with (
        Client(http_client=http, api_key=key_of(http, "bank-b")) as b,
        Client(http_client=http, api_key=key_of(http, "bank-a")) as a,
    ):
        b_mem = b.memory(user_id="ana", session_id="s1")
        added = b_mem.add("My card PIN hint is the name of my first cat, Misu")
        [episode_id] = added.episode_ids
        [fact] = b_mem.profile.set({"tag": "pets", "feature": "first_cat", "value": "Misu"})
        b_mem.state.set({"step": "verify-identity"})

        a_mem = a.memory(user_id="ana", session_id="s1")  # same ids, other tenant
        found = a_mem.search("first cat name")
        assert found.episodic == []
        assert found.profile == []
        assert a_mem.profile.get() == []
        assert a_mem.profile.search("cat") == []
        assert a_mem.episodes().total == 0
        assert a_mem.state.get().version == 0
        prompt = a_mem.prompt("What was my first cat called?")
        assert "Misu" not in str(prompt.messages)
        with pytest.raises(NotFoundError):
            a.get_episode(episode_id, user_id="ana")
        with pytest.raises(NotFoundError):
            a.get_fact(fact.id, user_id="ana")
        with pytest.raises(NotFoundError):
            a.delete_episode(episode_id, user_id="ana")
        with pytest.raises(NotFoundError):
            a.delete_fact(fact.id, user_id="ana")
        a_mem.forget()  # forgets A's own (empty) session, nothing of B's

        # B's memories are all still there.
        assert b.get_episode(episode_id, user_id="ana").content.startswith("My card PIN")
        assert [f.value for f in b_mem.profile.get()] == ["Misu"]
        assert b_mem.state.get().value == {"step": "verify-identity"}
        assert b_mem.search("first cat name").episodic
