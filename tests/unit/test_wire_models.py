"""The SDK cannot import the core, so the few rules it repeats must stay identical."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from memmachine import models as core
from memmachine_sdk import models as wire


def test_id_pattern_is_the_same_in_core_and_sdk() -> None:
    assert wire.ID_PATTERN == core.ID_PATTERN


@pytest.mark.parametrize("good", ["ana", "user@example.com", "a.b-c_d+e=f#g~h|i", "ü-ñ", "x" * 128])
def test_ids_accepted_by_both(good: str) -> None:
    assert wire.ScopeFields(user_id=good).user_id == good
    assert core.Scope(user_id=good).user_id == good


@pytest.mark.parametrize("bad", ["", "a:b", "a/b", "a b", "x" * 129, "tab\there"])
def test_ids_refused_by_both(bad: str) -> None:
    with pytest.raises(ValidationError):
        wire.ScopeFields(user_id=bad)
    with pytest.raises(ValidationError):
        core.Scope(user_id=bad)


def test_roles_are_the_same_in_core_and_sdk() -> None:
    assert wire.Role.__args__ == core.Role.__args__  # type: ignore[attr-defined]
