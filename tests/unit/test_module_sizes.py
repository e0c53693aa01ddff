"""The core stays in rooms a reader can take in: no module outside the adapters grows past
600 lines and the facade stays under 300, so new behaviour arrives as a new service, stage or
module instead of swelling an old one (STYLE_GUIDE.md, "Layers")."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import REPO_ROOT

CORE = REPO_ROOT / "memmachine"
MODULE_LIMIT = 600
FACADE_LIMIT = 300


def line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_core_module_outside_the_adapters_passes_the_limit() -> None:
    too_long = {
        str(path.relative_to(REPO_ROOT)): line_count(path)
        for path in CORE.rglob("*.py")
        if "adapters" not in path.relative_to(CORE).parts and line_count(path) >= MODULE_LIMIT
    }
    assert too_long == {}, f"split these modules (limit {MODULE_LIMIT} lines): {too_long}"


def test_the_facade_stays_thin() -> None:
    assert line_count(CORE / "manager.py") < FACADE_LIMIT
