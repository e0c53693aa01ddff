"""The inspection reads (/v1/whoami, /v1/users and a user's sessions, timeline, forget
preview and job counts) on a real app over the embedded stores."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

T = "2024-05-0{day}T10:00:00Z"


def add(api: TestClient, user: str, session: str, *days: int, **extra: Any) -> list[str]:
    response = api.post(
        "/v1/memories",
        json={
            "user_id": user,
            "session_id": session,
            "messages": [
                # a note number each: the same message twice in one add is stored once
                {
                    "role": "user",
                    "content": f"note {n} from day {day}",
                    "timestamp": T.format(day=day),
                }
                for n, day in enumerate(days)
            ],
            **extra,
        },
    )
    assert response.status_code == 201, response.text
    ids: list[str] = response.json()["episode_ids"]
    return ids


def test_open_server_says_who_the_caller_is(api: TestClient) -> None:
    me = api.get("/v1/whoami").json()
    assert me == {
        "tenant": "default",
        "key_id": None,
        "can_read": True,
        "can_write": True,
        "is_admin": False,
        "key_required": False,
    }


def test_users_are_listed_with_what_each_store_holds(api: TestClient) -> None:
    add(api, "ls-ann", "s1", 1, 2)
    add(api, "ls-ann", "s2", 3, working=False)
    add(api, "ls-bob", "s1", 1, working=False)
    facts = {"user_id": "ls-cid", "facts": [{"tag": "a", "feature": "b", "value": "c"}]}
    assert api.post("/v1/profile", json=facts).status_code == 200
    note = {"user_id": "ls-dee", "messages": [{"role": "user", "content": "hi"}]}
    assert api.post("/v1/sessions/w1/working/messages", json=note).status_code == 200
    other = api.post(
        "/v1/memories",
        params={"project_id": "elsewhere"},
        json={"user_id": "ls-eve", "session_id": "s", "messages": [{"content": "x"}]},
    )
    assert other.status_code == 201

    listed = api.get("/v1/users", params={"prefix": "ls-"}).json()

    rows = {
        u["user_id"]: (u["episodes"], u["sessions"], u["facts"], u["working_sessions"])
        for u in listed["users"]
    }
    assert rows == {
        "ls-ann": (3, 2, 0, 1),
        "ls-bob": (1, 1, 0, 0),
        "ls-cid": (0, 0, 1, 0),
        "ls-dee": (0, 0, 0, 1),
    }
    assert listed["next_after"] is None
    assert all(u["last_active"] is not None for u in listed["users"])
    elsewhere = api.get("/v1/users", params={"prefix": "ls-", "project_id": "elsewhere"}).json()
    assert [u["user_id"] for u in elsewhere["users"]] == ["ls-eve"]
    assert api.get("/v1/users/ls-ann").json()["episodes"] == 3


def test_users_page_with_after(api: TestClient) -> None:
    for name in ("pg-1", "pg-2", "pg-3"):
        add(api, name, "s", 1)
    first = api.get("/v1/users", params={"prefix": "pg-", "limit": 2}).json()
    second = api.get(
        "/v1/users", params={"prefix": "pg-", "limit": 2, "after": first["next_after"]}
    ).json()
    assert [u["user_id"] for u in first["users"]] == ["pg-1", "pg-2"]
    assert first["next_after"] == "pg-2"
    assert [u["user_id"] for u in second["users"]] == ["pg-3"]
    assert second["next_after"] is None


def test_a_users_sessions_and_timeline(api: TestClient) -> None:
    add(api, "tl-ann", "s1", 1, 1, 4)
    add(api, "tl-ann", "s2", 4, working=False)

    sessions = api.get("/v1/users/tl-ann/sessions").json()
    daily = api.get("/v1/users/tl-ann/timeline").json()
    one = api.get("/v1/users/tl-ann/timeline", params={"session_id": "s2"}).json()

    assert [(s["session_id"], s["episodes"]) for s in sessions["sessions"]] == [
        ("s2", 1),
        ("s1", 3),
    ]
    assert sessions["sessions"][1]["first_at"].startswith("2024-05-01T10:00:00")
    assert [(w["session_id"], w["message_count"]) for w in sessions["working"]] == [("s1", 3)]
    assert [(b["start"][:10], b["count"]) for b in daily["buckets"]] == [
        ("2024-05-01", 2),
        ("2024-05-04", 2),
    ]
    assert [(b["start"][:10], b["count"]) for b in one["buckets"]] == [("2024-05-04", 1)]
    paged = api.get("/v1/users/tl-ann/sessions", params={"limit": 1, "offset": 1}).json()
    assert [s["session_id"] for s in paged["sessions"]] == ["s1"]


def test_forget_preview_names_what_a_forget_removes(api: TestClient) -> None:
    add(api, "fp-ann", "s1", 1, 2)
    add(api, "fp-ann", "s2", 3)
    fact = {"tag": "pets", "feature": "dog", "value": "Toast"}
    stored = api.post(
        "/v1/profile", json={"user_id": "fp-ann", "session_id": "s1", "facts": [fact]}
    )
    assert stored.status_code == 200

    session = api.get("/v1/users/fp-ann/forget-preview", params={"session_id": "s1"}).json()
    user = api.get("/v1/users/fp-ann/forget-preview").json()

    assert session == {
        "user_id": "fp-ann",
        "session_id": "s1",
        "episodes": 2,
        "facts": 1,
        "sessions": 1,
        "working_sessions": 1,
    }
    assert (user["episodes"], user["facts"], user["sessions"], user["working_sessions"]) == (
        3,
        1,
        2,
        2,
    )
    forgot = api.delete("/v1/sessions/s1", params={"user_id": "fp-ann"}).json()
    assert (forgot["episodes_deleted"], forgot["facts_deleted"]) == (2, 1)
    after = api.get("/v1/users/fp-ann/forget-preview", params={"session_id": "s1"}).json()
    assert (after["episodes"], after["facts"], after["working_sessions"]) == (0, 0, 0)


def test_job_counts(api: TestClient) -> None:
    add(api, "jc-ann", "s1", 1)
    queued = api.post("/v1/sessions/s1/compact", params={"user_id": "jc-ann"})
    assert queued.status_code == 200, queued.text
    counts = api.get("/v1/users/jc-ann/job-counts").json()
    assert set(counts) == {"queued", "running", "done", "dead"}
    assert sum(counts.values()) == 1


def test_bad_ids_are_refused_naming_the_field(api: TestClient) -> None:
    prefix = api.get("/v1/users", params={"prefix": "a/b"})
    org = api.get("/v1/users", headers={"X-Org-ID": "no spaces"})
    limit = api.get("/v1/users", params={"limit": 0})
    assert (prefix.status_code, prefix.json()["error"]["field"]) == (422, "prefix")
    assert (org.status_code, org.json()["error"]["field"]) == (422, "org_id")
    assert (limit.status_code, limit.json()["error"]["field"]) == (422, "limit")
    assert api.get("/v1/users/nobody-at-all").status_code == 404


def test_an_episodes_neighbours_in_its_session(api: TestClient) -> None:
    ids = add(api, "nb-ann", "s1", 1, 2, 3, 4, 5)
    add(api, "nb-ann", "s2", 3)

    around = api.get(
        f"/v1/memories/{ids[2]}/neighbours", params={"user_id": "nb-ann", "before": 1}
    ).json()

    assert around["episode"]["id"] == ids[2]
    assert [e["id"] for e in around["before"]] == [ids[1]]
    assert [e["id"] for e in around["after"]] == [ids[3], ids[4]]
    missing = api.get(f"/v1/memories/{ids[2]}/neighbours", params={"user_id": "nb-bob"})
    assert missing.status_code == 404
