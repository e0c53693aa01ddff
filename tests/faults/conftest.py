"""The fault suite: crashes, outages, freezes and races against real stores, each case
counting what the clients were told against what the stores hold.

Every case calls :func:`tally` once per run; the counts are printed in the terminal summary
(``fault suite counts``) and are what ``RELIABILITY.md`` records. The suite runs in CI: it
is bounded (fixed numbers of writes, short timeouts) and talks to loopback servers only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from tests.server.conftest import app_factory  # noqa: F401  (a fixture of the fault cases too)

_TALLIES = pytest.StashKey[list["Tally"]]()


@dataclass(frozen=True)
class Tally:
    """One case's counts, by name, in the order given. The usual ones: ``acknowledged``
    (writes the client was told succeeded), ``stored`` (distinct writes found in the stores
    afterwards), ``lost`` (acknowledged but not stored), ``duplicated`` (stored more than
    once) and ``unknown`` (answered "outcome unknown", or not answered: may or may not be
    stored)."""

    case: str
    counts: dict[str, int] = field(default_factory=dict)

    def line(self) -> str:
        counts = " ".join(f"{name}={value}" for name, value in self.counts.items())
        return f"{self.case}: {counts}"


Report = Callable[..., Tally]


@pytest.fixture
def tally(request: pytest.FixtureRequest) -> Report:
    """``tally(case=..., acknowledged=..., stored=..., lost=..., duplicated=..., ...)``
    records this test's counts (printed now and in the terminal summary) and returns them."""

    def report(*, case: str | None = None, **counts: int) -> Tally:
        found = Tally(case=case or request.node.nodeid.split("::", 1)[-1], counts=counts)
        request.config.stash.setdefault(_TALLIES, []).append(found)
        print(found.line())
        return found

    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    found = terminalreporter.config.stash.get(_TALLIES, [])
    if not found:
        return
    terminalreporter.section("fault suite counts")
    for item in found:
        terminalreporter.write_line(item.line())
