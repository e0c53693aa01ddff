"""Two tenants on one server, with the same user, session and ids: tenant A's key reaches
none of tenant B's memories through any /v1 route, and cannot change or delete them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient

from memmachine_server.app import create_app
from tests.server.conftest import LOCAL, make_settings

ADMIN = "isolation-admin-key-42"
#: A word only tenant B ever writes; it must never appear in an answer to tenant A.
SECRET = "zebraumbrella"
USER = "shared-user"
SESSION = "shared-session"


@dataclass
class World:
    app: TestClient
    a: dict[str, str]  # tenant A's headers
    b: dict[str, str]  # tenant B's headers
    b_episode_ids: list[str]
    b_fact_id: str
    b_job_id: str


def _key(app: TestClient, tenant: str) -> dict[str, str]:
    response = app.post(
        "/v1/admin/keys", json={"tenant": tenant}, headers={"Authorization": f"Bearer {ADMIN}"}
    )
    assert response.status_code == 201, response.text
    return {"Authorization": f"Bearer {response.json()['key']}"}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """Tenant B holds episodes, a profile fact, working memory and a job for
    ``shared-user`` / ``shared-session``; tenant A holds nothing yet."""
    settings = make_settings(tmp_path_factory.mktemp("isolation"), admin_key=ADMIN)
    with TestClient(create_app(settings), raise_server_exceptions=False, base_url=LOCAL) as app:
        a, b = _key(app, "tenant-a"), _key(app, "tenant-b")
        added = app.post(
            "/v1/memories",
            headers=b,
            json={
                "user_id": USER,
                "session_id": SESSION,
                "messages": [
                    {"role": "user", "content": f"My locker password is {SECRET}"},
                    {"role": "assistant", "content": f"Noted, {SECRET} it is"},
                ],
            },
        )
        assert added.status_code == 201, added.text
        fact = app.post(
            "/v1/profile",
            headers=b,
            json={
                "user_id": USER,
                "facts": [{"tag": "secrets", "feature": "locker", "value": SECRET}],
            },
        )
        assert fact.status_code == 200, fact.text
        state = app.put(
            f"/v1/sessions/{SESSION}/working",
            headers=b,
            json={"user_id": USER, "state": {"locker": SECRET}},
        )
        assert state.status_code == 200, state.text
        job = app.post(f"/v1/sessions/{SESSION}/compact", params={"user_id": USER}, headers=b)
        assert job.status_code == 200, job.text
        yield World(
            app=app,
            a=a,
            b=b,
            b_episode_ids=added.json()["episode_ids"],
            b_fact_id=fact.json()["facts"][0]["id"],
            b_job_id=job.json()["job"]["id"],
        )


def clean(response: Any, *statuses: int) -> Any:
    """The response to tenant A: one of ``statuses`` and nothing of tenant B's in it."""
    assert response.status_code in statuses, response.text
    assert SECRET not in response.text
    return response.json() if response.content else None


def tool_call(name: str, arguments: str) -> dict[str, Any]:
    return {
        "user_id": USER,
        "session_id": SESSION,
        "tool_call": {
            "id": f"call-{name}",
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        },
    }


def test_tenant_a_reads_none_of_tenant_bs_memories(world: World) -> None:
    app, a = world.app, world.a
    user = {"user_id": USER}
    assert clean(app.get("/v1/memories", params=user, headers=a), 200)["total"] == 0
    for episode_id in world.b_episode_ids:
        clean(app.get(f"/v1/memories/{episode_id}", params=user, headers=a), 404)
    search = clean(
        app.post(
            "/v1/memories/search",
            json={"user_id": USER, "session_id": SESSION, "query": f"locker password {SECRET}"},
            headers=a,
        ),
        200,
    )
    assert search["episodic"] == []
    assert search["profile"] == []
    assert search["working"] is None or search["working"]["messages"] == []

    assert clean(app.get("/v1/profile", params=user, headers=a), 200)["facts"] == []
    found = app.post("/v1/profile/search", json={"user_id": USER, "query": SECRET}, headers=a)
    assert clean(found, 200)["facts"] == []
    history = app.get(
        "/v1/profile/history", params={**user, "tag": "secrets", "feature": "locker"}, headers=a
    )
    assert clean(history, 200) == {"current": None, "history": []}
    clean(app.get(f"/v1/profile/facts/{world.b_fact_id}", params=user, headers=a), 404)

    working = clean(app.get(f"/v1/sessions/{SESSION}/working", params=user, headers=a), 200)
    assert working["messages"] == []
    assert working["version"] == 0

    prompt = app.post(
        "/v1/memory-prompt",
        json={"user_id": USER, "session_id": SESSION, "query": f"what is my {SECRET} locker?"},
        headers=a,
    )
    body = prompt.json()
    assert prompt.status_code == 200, prompt.text
    # The new message itself echoes the query; nothing else may carry B's word.
    assert SECRET not in prompt.text.replace(f"what is my {SECRET} locker?", "")
    assert body is not None

    recall = app.post(
        "/v1/tools/execute", json=tool_call("recall", '{"query": "locker"}'), headers=a
    )
    clean(recall, 200)

    clean(app.get(f"/v1/jobs/{world.b_job_id}", params=user, headers=a), 404)
    assert clean(app.get("/v1/jobs", params=user, headers=a), 200)["jobs"] == []


def test_tenant_a_lists_none_of_tenant_bs_users(world: World) -> None:
    """The inspector's reads: tenant B's user is invisible to tenant A's key."""
    app, a, b = world.app, world.a, world.b
    assert clean(app.get("/v1/users", headers=a), 200) == {"users": [], "next_after": None}
    assert clean(app.get("/v1/users", params={"prefix": USER[:3]}, headers=a), 200)["users"] == []
    clean(app.get(f"/v1/users/{USER}", headers=a), 404)
    sessions = clean(app.get(f"/v1/users/{USER}/sessions", headers=a), 200)
    assert (sessions["sessions"], sessions["working"]) == ([], [])
    assert clean(app.get(f"/v1/users/{USER}/timeline", headers=a), 200)["buckets"] == []
    preview = clean(app.get(f"/v1/users/{USER}/forget-preview", headers=a), 200)
    assert (preview["episodes"], preview["facts"], preview["working_sessions"]) == (0, 0, 0)
    counts = clean(app.get(f"/v1/users/{USER}/job-counts", headers=a), 200)
    assert sum(counts.values()) == 0
    # tenant B's own key sees its user
    [user] = app.get("/v1/users", headers=b).json()["users"]
    assert (user["user_id"], user["episodes"], user["facts"]) == (USER, 2, 1)
    assert app.get("/v1/whoami", headers=a).json()["tenant"] == "tenant-a"


def test_tenant_a_cannot_change_or_delete_tenant_bs_memories(world: World) -> None:
    app, a = world.app, world.a
    user = {"user_id": USER}
    for episode_id in world.b_episode_ids:
        clean(app.delete(f"/v1/memories/{episode_id}", params=user, headers=a), 404)
    clean(app.delete(f"/v1/profile/facts/{world.b_fact_id}", params=user, headers=a), 404)
    clean(app.post(f"/v1/jobs/{world.b_job_id}/replay", params=user, headers=a), 404)
    # B's session has working memory; A's has none, so there is nothing of A's to delete.
    clean(app.delete(f"/v1/sessions/{SESSION}/working", params=user, headers=a), 404)
    assert clean(app.delete("/v1/profile", params=user, headers=a), 200)["deleted"] == 0

    # Writes under the same ids land in tenant A's own memory.
    mine = {"tag": "secrets", "feature": "locker", "value": "alpha"}
    clean(app.post("/v1/profile", json={**user, "facts": [mine]}, headers=a), 200)
    clean(
        app.put(
            f"/v1/sessions/{SESSION}/working", json={**user, "state": {"locker": "A"}}, headers=a
        ),
        200,
    )
    clean(
        app.post(
            f"/v1/sessions/{SESSION}/working/messages",
            json={**user, "messages": [{"role": "user", "content": "alpha says hi"}]},
            headers=a,
        ),
        200,
    )
    clean(
        app.post(
            "/v1/tools/execute",
            json=tool_call("remember", '{"content": "alpha likes tea"}'),
            headers=a,
        ),
        200,
    )
    clean(app.post(f"/v1/sessions/{SESSION}/compact?wait=true", params=user, headers=a), 200)
    clean(app.post(f"/v1/sessions/{SESSION}/compact", params=user, headers=a), 200)
    for which in ("session", "user"):
        forget = tool_call("forget", f'{{"scope": "{which}", "session_id": null}}')
        clean(app.post("/v1/tools/execute", json=forget, headers=a), 200)
    clean(app.delete(f"/v1/sessions/{SESSION}/working", params=user, headers=a), 204, 404)
    clean(app.delete(f"/v1/sessions/{SESSION}", params=user, headers=a), 200)
    clean(app.delete(f"/v1/users/{USER}", headers=a), 200)

    # Tenant B's memories are all still there, unchanged.
    b = world.b
    episodes = app.get("/v1/memories", params=user, headers=b).json()
    assert sorted(e["id"] for e in episodes["episodes"]) == sorted(world.b_episode_ids)
    for episode_id in world.b_episode_ids:
        assert app.get(f"/v1/memories/{episode_id}", params=user, headers=b).status_code == 200
    fact = app.get(f"/v1/profile/facts/{world.b_fact_id}", params=user, headers=b)
    assert fact.status_code == 200
    assert fact.json()["value"] == SECRET
    working = app.get(f"/v1/sessions/{SESSION}/working", params=user, headers=b).json()
    assert working["state"] == {"locker": SECRET}
    assert [m["content"] for m in working["messages"]][:1] == [f"My locker password is {SECRET}"]
    job = app.get(f"/v1/jobs/{world.b_job_id}", params=user, headers=b)
    assert job.status_code == 200
    hits = app.post("/v1/memories/search", json={"user_id": USER, "query": SECRET}, headers=b)
    assert SECRET in hits.text
