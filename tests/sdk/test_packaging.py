"""The SDK stands alone: it declares only httpx and pydantic, imports nothing of the
server or the core, and works in an interpreter that has nothing else."""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.conftest import REPO_ROOT

SDK = REPO_ROOT / "sdk"


def test_sdk_declares_only_httpx_and_pydantic() -> None:
    project = tomllib.loads((SDK / "pyproject.toml").read_text())["project"]
    names = {re.split(r"[<>=!~\[ ;]", dep, maxsplit=1)[0] for dep in project["dependencies"]}
    assert names == {"httpx", "pydantic"}
    assert project["name"] == "memmachine-sdk"


def test_sdk_sources_import_only_the_stdlib_httpx_and_pydantic() -> None:
    """The framework adapters (``integrations/``, optional extras) are checked in
    ``tests/integrations/test_extras.py``."""
    allowed = set(sys.stdlib_module_names) | {"httpx", "pydantic", "memmachine_sdk"}
    for source in sorted((SDK / "memmachine_sdk").rglob("*.py")):
        if "integrations" in source.relative_to(SDK / "memmachine_sdk").parts:
            continue
        tree = ast.parse(source.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                roots = [node.module.split(".")[0]]
            else:
                continue
            assert set(roots) <= allowed, f"{source.name} imports {roots}"


def _closure(name: str) -> set[str]:
    """The installed distributions ``name`` needs (itself excluded); extras are ignored
    and a requirement not installed here is one its environment marker excluded."""
    found: set[str] = set()
    todo = [name]
    while todo:
        try:
            requirements = metadata.distribution(todo.pop()).requires or []
        except metadata.PackageNotFoundError:
            continue
        for requirement in requirements:
            if "extra ==" in requirement:
                continue
            dep = re.split(r"[<>=!~\[ ;(]", requirement, maxsplit=1)[0].lower()
            if dep not in found:
                found.add(dep)
                todo.append(dep)
    return found


def test_sdk_works_with_only_its_dependencies_installed(tmp_path: Path) -> None:
    """Build a path holding only the SDK's dependency closure, then use the SDK from an
    interpreter without site-packages: memmachine and the server are not importable."""
    site = Path(metadata.distribution("httpx").locate_file(""))
    lib = tmp_path / "lib"
    lib.mkdir()
    wanted = _closure("memmachine-sdk")
    for top, dists in metadata.packages_distributions().items():
        if not {dist.lower().replace("_", "-") for dist in dists} & wanted:
            continue
        for candidate in [site / top, *site.glob(f"{top}.py"), *site.glob(f"{top}.*.so")]:
            if candidate.exists() and not (lib / candidate.name).exists():
                (lib / candidate.name).symlink_to(candidate)
    script = """
import json, sys, httpx
import memmachine_sdk
from memmachine_sdk import Client
assert not [m for m in sys.modules if m.split(".")[0] in ("memmachine", "memmachine_server")]
try:
    import memmachine
except ModuleNotFoundError:
    pass
else:
    raise SystemExit("memmachine is importable: the test path is not isolated")
health = {"status": "ok", "version": "1", "mode": "lexical-only",
          "embedder": {"enabled": False}, "stores": {}}
transport = httpx.MockTransport(lambda request: httpx.Response(200, json=health))
with Client("http://memmachine.test", transport=transport) as mm:
    print(mm.health().mode)
"""
    result = subprocess.run(
        [sys.executable, "-S", "-c", script],
        cwd=tmp_path,
        env={"PYTHONPATH": f"{SDK}:{lib}", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "lexical-only"


def test_importing_the_sdk_loads_neither_core_nor_server() -> None:
    script = (
        "import sys, memmachine_sdk, memmachine_sdk.models\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'memmachine', 'memmachine_server', 'fastapi', 'redis', 'sqlalchemy'}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
