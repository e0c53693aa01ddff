"""The confidence rules: corroboration raises, contradiction and age lower, and a weaker
challenger never replaces a stronger fact."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memmachine.memory.confidence import contradicted, corroborated, effective, supersedes

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_corroboration_raises_confidence_but_never_past_one() -> None:
    assert corroborated(0.6, 0.6) == pytest.approx(0.84)
    assert corroborated(0.84, 0.6) > corroborated(0.6, 0.6)  # more evidence, more sure
    assert corroborated(1.0, 0.3) == 1.0
    assert corroborated(0.0, 0.7) == pytest.approx(0.7)
    assert corroborated(2.0, -1.0) == 1.0  # out-of-range inputs are clamped


def test_contradiction_lowers_confidence_by_the_challengers_weight() -> None:
    assert contradicted(0.9, 0.5) == pytest.approx(0.45)
    assert contradicted(0.9, 0.0) == pytest.approx(0.9)
    assert contradicted(0.9, 1.0) == 0.0


def test_confidence_halves_every_half_life_since_the_last_confirmation() -> None:
    assert effective(0.8, T0, T0, 180) == pytest.approx(0.8)
    assert effective(0.8, T0, T0 + timedelta(days=180), 180) == pytest.approx(0.4)
    assert effective(0.8, T0, T0 + timedelta(days=360), 180) == pytest.approx(0.2)
    assert effective(0.8, T0, T0 - timedelta(days=5), 180) == pytest.approx(0.8)
    assert effective(0.8, T0, T0 + timedelta(days=9_999), 0) == pytest.approx(0.8)


def test_only_an_equal_or_stronger_challenger_replaces_a_fact() -> None:
    assert supersedes(0.9, 0.9)
    assert supersedes(0.7, effective(0.95, T0, T0 + timedelta(days=365), 180))
    assert not supersedes(0.5, 0.95)
