"""The clock port: what "now" is for expiry and retention.

Contract: ``now()`` returns an aware UTC datetime; successive calls never go backwards
within one process. The system clock serves production; tests pass a clock they move by
hand, so expiry is tested at its boundary without sleeping.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol, runtime_checkable

from memmachine.models import utc_now

__all__ = ["Clock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    def now(self) -> datetime: ...


class SystemClock:
    """The machine's clock, in UTC."""

    def now(self) -> datetime:
        return utc_now()
