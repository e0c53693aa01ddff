"""``GET /v1/profile/history``: a replaced value stays readable with its provenance."""

from __future__ import annotations

from fastapi.testclient import TestClient


def set_fact(api: TestClient, user: str, value: str) -> None:
    response = api.post(
        "/v1/profile",
        json={
            "user_id": user,
            "facts": [{"tag": "preferences", "feature": "drink", "value": value}],
        },
    )
    assert response.status_code == 200, response.text


def test_history_lists_superseded_values_oldest_first(api: TestClient) -> None:
    user = "hist-alice"
    set_fact(api, user, "coffee")
    set_fact(api, user, "coffee")  # corroboration: no new version
    set_fact(api, user, "tea")
    set_fact(api, user, "water")
    params = {"user_id": user, "tag": "preferences", "feature": "drink"}
    body = api.get("/v1/profile/history", params=params).json()
    assert body["current"]["value"] == "water"
    assert [v["value"] for v in body["history"]] == ["coffee", "tea"]
    assert all(v["reason"] == "superseded" for v in body["history"])
    assert body["history"][0]["valid_to"] == body["history"][1]["valid_from"]
    # Other users see nothing; unknown features have no history.
    other = api.get("/v1/profile/history", params={**params, "user_id": "hist-bob"}).json()
    assert other == {"current": None, "history": []}
    missing = api.get("/v1/profile/history", params={"user_id": user, "tag": "preferences"})
    assert missing.status_code == 422
