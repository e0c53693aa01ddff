"""A clock the test moves by hand (the :class:`~memmachine.ports.Clock` port)."""

from __future__ import annotations

from datetime import datetime, timedelta

from memmachine.models import utc_now


class ManualClock:
    """Stands still until told to move; starts at the real time (whole seconds) so what
    the stores stamp with their own clock stays close to it."""

    def __init__(self, start: datetime | None = None) -> None:
        self.current = start or utc_now().replace(microsecond=0)

    def now(self) -> datetime:
        return self.current

    def advance(self, seconds: float) -> datetime:
        self.current += timedelta(seconds=seconds)
        return self.current

    def set(self, moment: datetime) -> None:
        self.current = moment
