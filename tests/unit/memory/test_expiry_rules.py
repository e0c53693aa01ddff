"""Expiry and retention rules: what an expiry request becomes, the boundary instant, which
policy applies to a scope, and the one-line policy in a settings file."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memmachine.config import RetentionPolicy, RetentionSettings, Settings
from memmachine.errors import InvalidInputError
from memmachine.memory.expiry import EXPIRES_AT, is_expired, stamped
from memmachine.models import ProjectScope, Scope

NOW = datetime(2026, 5, 5, 12, 0, tzinfo=UTC)


def test_a_ttl_or_a_timestamp_becomes_one_expiry_and_the_instant_itself_is_expired() -> None:
    by_ttl = stamped({}, None, 600, NOW, "messages.0")
    by_time = stamped({}, datetime(2026, 5, 5, 14, 10, tzinfo=UTC), None, NOW, "messages.0")
    assert by_ttl == {EXPIRES_AT: "2026-05-05T12:10:00+00:00"}
    assert by_time == {EXPIRES_AT: "2026-05-05T14:10:00+00:00"}
    assert not is_expired(by_ttl, NOW + timedelta(seconds=599, microseconds=999_999))
    assert is_expired(by_ttl, NOW + timedelta(seconds=600))
    assert stamped({"channel": "sms"}, None, None, NOW, "messages.0") == {}
    # An imported memory's expiry is kept.
    kept = stamped({EXPIRES_AT: "2026-05-05T12:10:00Z"}, None, None, NOW, "x")
    assert kept == {EXPIRES_AT: "2026-05-05T12:10:00+00:00"}


@pytest.mark.parametrize(
    ("expires_at", "ttl", "field"),
    [
        (None, 0, "messages.3.ttl_seconds"),
        (None, -5, "messages.3.ttl_seconds"),
        (NOW + timedelta(seconds=1), 5, "messages.3.ttl_seconds"),
        (NOW, None, "messages.3.expires_at"),
        (NOW - timedelta(days=1), None, "messages.3.expires_at"),
    ],
)
def test_a_bad_expiry_is_refused_naming_the_field(
    expires_at: datetime | None, ttl: int | None, field: str
) -> None:
    with pytest.raises(InvalidInputError) as refused:
        stamped({}, expires_at, ttl, NOW, "messages.3")
    assert refused.value.field == field


def test_the_most_specific_policy_applies() -> None:
    settings = RetentionSettings(
        policies=[
            RetentionPolicy(tenant="acme", episodes_max_age_days=90),
            RetentionPolicy(tenant="acme", project_id="support", episodes_max_age_days=30),
            RetentionPolicy(
                tenant="acme", project_id="support", agent_id="triage", episodes_max_age_days=7
            ),
            RetentionPolicy(tenant="globex", facts_max_age_days={"*": 10, "notes": 1}),
        ]
    )

    def days(**ids: str) -> float | None:
        policy = settings.policy_for(Scope(user_id="u", **ids))
        return None if policy is None else policy.episodes_max_age_days

    assert days(tenant="acme") == 90
    assert days(tenant="acme", project_id="support") == 30
    assert days(tenant="acme", project_id="support", agent_id="triage") == 7
    assert days(tenant="acme", project_id="sales", agent_id="triage") == 90
    assert days(tenant="initech") is None
    globex = settings.policy_for(Scope(tenant="globex", user_id="u"))
    assert globex is not None
    assert globex.fact_max_age_seconds("notes") == 86_400
    assert globex.fact_max_age_seconds("pets") == 10 * 86_400
    assert globex.episodes_max_age_seconds is None
    assert ProjectScope(tenant="acme", project_id="support") in settings.swept_projects()


def test_keep_profile_drop_transcripts_is_one_line_of_the_settings_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "memmachine.yaml"
    path.write_text("retention:\n  policies:\n    - {tenant: acme, episodes_max_age_days: 90}\n")
    monkeypatch.setenv("MEMMACHINE_CONFIG", str(path))
    policy = Settings().retention.policy_for(Scope(tenant="acme", user_id="u"))
    assert policy is not None
    assert policy.episodes_max_age_seconds == 90 * 86_400
    assert policy.facts_max_age_days == {}
    assert policy.working_max_age_seconds is None


def test_a_policy_with_an_unknown_key_or_a_bad_age_is_refused() -> None:
    with pytest.raises(ValueError, match="episode_max_age"):
        RetentionPolicy.model_validate({"tenant": "acme", "episode_max_age": 3})
    with pytest.raises(ValueError, match="episodes_max_age_days"):
        RetentionPolicy(tenant="acme", episodes_max_age_days=0)
