"""The import graph keeps its contracts (pyproject.toml, ``[tool.importlinter]``): each layer
of the core imports only the layers below it, adapters know nothing above ports and models,
the SDK stands alone, and no package has an import circle."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint(root: Path = REPO_ROOT) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` with the project's contracts over the ``memmachine`` in ``root``."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", str(REPO_ROOT / "pyproject.toml")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_every_import_contract_is_kept() -> None:
    result = lint()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "5 kept, 0 broken" in result.stdout


def test_an_upward_import_and_the_circle_it_makes_are_caught(tmp_path: Path) -> None:
    # A copy of the core in which the models (the bottom layer) import the manager.
    shutil.copytree(REPO_ROOT / "memmachine", tmp_path / "memmachine")
    models = tmp_path / "memmachine" / "models.py"
    models.write_text(models.read_text() + "\nimport memmachine.manager  # noqa\n")
    result = lint(tmp_path)
    assert result.returncode == 1
    broken = [line for line in result.stdout.splitlines() if line.endswith("BROKEN")]
    assert any("each layer imports only the layers below it" in line for line in broken)
    assert any("no import circles" in line for line in broken)


def test_an_adapter_reaching_for_a_service_is_caught(tmp_path: Path) -> None:
    shutil.copytree(REPO_ROOT / "memmachine", tmp_path / "memmachine")
    adapter = tmp_path / "memmachine" / "adapters" / "health.py"
    adapter.write_text(adapter.read_text() + "\nimport memmachine.config  # noqa\n")
    result = lint(tmp_path)
    assert result.returncode == 1
    assert "adapters depend on ports and models only" in result.stdout
