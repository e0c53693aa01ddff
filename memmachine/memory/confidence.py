"""How sure memmachine is of a profile fact, as evidence comes and goes.

A fact's stored ``confidence`` (0-1) moves with evidence:

* **corroboration** — another independent observation of the same value — combines the two
  as independent evidence: ``1 - (1 - a)(1 - b)``. Two 0.6 observations give 0.84; a
  value the user stated outright (1.0) stays 1.0.
* **contradiction** — an observation of a different value that is weaker than the
  fact — discounts the fact by the challenger's weight: ``a * (1 - b)``. A challenger at
  least as strong as the (aged) fact replaces it instead; that is an update, and the old
  value goes to the history.
* **age** — evidence goes stale. What a fact is worth now halves every
  ``half_life_days`` since it was last confirmed (``updated_at``); the stored value is
  not rewritten, the decay is applied when the fact is read (:func:`effective`).

A fact whose confidence falls below the configured minimum after a contradiction is
invalidated (closed with its history kept), not left to linger.
"""

from __future__ import annotations

import math
from datetime import datetime

__all__ = ["contradicted", "corroborated", "effective", "supersedes"]

_SECONDS_PER_DAY = 86_400.0


def _clamp(value: float) -> float:
    return min(1.0, max(0.0, value))


def corroborated(current: float, evidence: float) -> float:
    """The confidence after an independent observation of the same value."""
    current, evidence = _clamp(current), _clamp(evidence)
    return _clamp(1.0 - (1.0 - current) * (1.0 - evidence))


def contradicted(current: float, evidence: float) -> float:
    """The confidence after a weaker observation of a different value."""
    return _clamp(_clamp(current) * (1.0 - _clamp(evidence)))


def effective(
    confidence: float, confirmed_at: datetime, now: datetime, half_life_days: float
) -> float:
    """What ``confidence``, last confirmed at ``confirmed_at``, is worth at ``now``
    (``half_life_days`` <= 0: no decay; a time in the future counts as now)."""
    if half_life_days <= 0:
        return _clamp(confidence)
    age_days = max(0.0, (now - confirmed_at).total_seconds() / _SECONDS_PER_DAY)
    return _clamp(confidence * math.pow(0.5, age_days / half_life_days))


def supersedes(challenger: float, current_effective: float) -> bool:
    """Whether a different value observed with ``challenger`` confidence replaces a fact
    worth ``current_effective`` now (ties go to the newer observation)."""
    return _clamp(challenger) >= _clamp(current_effective)
