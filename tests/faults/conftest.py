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

_TALLIES = pytest.StashKey[list["Tally"]]()


@dataclass(frozen=True)
class Tally:
    """One case's accounting. ``acknowledged``: writes the client was told succeeded;
    ``stored``: distinct writes found in the stores afterwards; ``lost``: acknowledged but
    not stored; ``duplicated``: stored more than once. ``unknown``: writes answered with
    "outcome unknown" (or no answer), which may or may not be stored."""

    case: str
    acknowledged: int
    stored: int
    lost: int
    duplicated: int
    unknown: int = 0
    notes: dict[str, int] = field(default_factory=dict)

    def line(self) -> str:
        extra = "".join(f" {name}={value}" for name, value in sorted(self.notes.items()))
        return (
            f"{self.case}: acknowledged={self.acknowledged} stored={self.stored} "
            f"lost={self.lost} duplicated={self.duplicated} unknown={self.unknown}{extra}"
        )


Report = Callable[..., Tally]


@pytest.fixture
def tally(request: pytest.FixtureRequest) -> Report:
    """``tally(acknowledged=..., stored=..., lost=..., duplicated=...)`` records this test's
    counts (printed now and in the terminal summary) and returns them."""

    def report(
        *,
        acknowledged: int,
        stored: int,
        lost: int,
        duplicated: int,
        unknown: int = 0,
        case: str | None = None,
        **notes: int,
    ) -> Tally:
        found = Tally(
            case=case or request.node.nodeid.split("::", 1)[-1],
            acknowledged=acknowledged,
            stored=stored,
            lost=lost,
            duplicated=duplicated,
            unknown=unknown,
            notes=notes,
        )
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
