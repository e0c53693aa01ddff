"""The TypeScript client (sdk/typescript): its types are generated from the app's current
OpenAPI document, it compiles with ``tsc --strict`` into an ESM package with type
declarations and no runtime dependency, and its Node tests pass against a live
``memmachine serve`` that this test starts (``npm ci`` first: ``.ci/run`` does it)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from memmachine.config import Settings
from memmachine_server.app import create_app
from tests.conftest import REPO_ROOT, shared_model_dir, unavailable
from tests.live import LiveServer, clean_environment, serve

PACKAGE = REPO_ROOT / "sdk" / "typescript"
KEYS = {"ts-key-acme": "acme", "ts-key-globex": "globex"}


def npm(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    """Run an npm script of the package; its output (stdout and stderr)."""
    result = subprocess.run(
        ["npm", *args],
        cwd=PACKAGE,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    return output


@pytest.fixture(scope="module")
def installed() -> None:
    if shutil.which("npm") is None:
        unavailable("npm is not installed (Node 20+; .ci/run installs it)")
    if not (PACKAGE / "node_modules" / ".bin" / "tsc").exists():
        unavailable("sdk/typescript has no node_modules: run `npm ci` there (.ci/run does)")


@pytest.fixture(scope="module")
def live(installed: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("ts-live")
    model = shared_model_dir()
    embedding = (
        {"MEMMACHINE_EMBEDDING_PROVIDER": "local", "MEMMACHINE_EMBEDDING_MODEL": str(model)}
        if model is not None
        else {"MEMMACHINE_EMBEDDING_PROVIDER": "none"}
    )
    env = clean_environment(
        MEMMACHINE_DATA_DIR=str(tmp / "data"),
        MEMMACHINE_API_KEYS=",".join(f"{key}={tenant}" for key, tenant in KEYS.items()),
        **embedding,
    )
    with serve(tmp, env) as server:
        yield server


def test_the_committed_document_and_types_are_the_live_apps_current_ones(
    live: LiveServer,
) -> None:
    """Fails when a route, a model or an example changed and nobody ran
    ``memmachine openapi --out sdk/typescript/openapi.json && npm run generate``."""
    served = httpx.get(live.url + "/openapi.json", timeout=10).json()
    assert served == create_app(Settings.model_construct()).openapi()  # what the CLI writes
    snapshot = json.loads((PACKAGE / "openapi.json").read_text(encoding="utf-8"))
    assert snapshot == served, (
        "sdk/typescript/openapi.json is stale: run `uv run memmachine openapi --out "
        "sdk/typescript/openapi.json` and `npm run generate` in sdk/typescript"
    )
    npm("run", "check:schema")  # src/schema.ts is what openapi-typescript makes of it


def test_it_compiles_strictly_into_esm_with_declarations_and_no_dependency(
    installed: None, tmp_path: Path
) -> None:
    out = tmp_path / "dist"
    tsc = str(PACKAGE / "node_modules" / ".bin" / "tsc")
    subprocess.run(
        [tsc, "-p", "tsconfig.json", "--strict", "--outDir", str(out)],
        cwd=PACKAGE,
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    manifest = json.loads((PACKAGE / "package.json").read_text())
    assert manifest["type"] == "module"
    assert "dependencies" not in manifest
    assert "peerDependencies" not in manifest
    assert manifest["exports"]["."] == {"types": "./dist/index.d.ts", "import": "./dist/index.js"}
    assert (out / "index.d.ts").is_file()
    for module in out.glob("*.js"):
        imports = re.findall(
            r"""^\s*(?:import|export)\b[^'"]*?from\s+['"]([^'"]+)['"]""",
            module.read_text(),
            flags=re.MULTILINE,
        )
        assert all(spec.startswith("./") for spec in imports), (module.name, imports)
    check = "import('./index.js').then(m => console.log(typeof m.MemMachineClient))"
    loaded = subprocess.run(
        ["node", "--input-type=module", "-e", check.replace("./index.js", str(out / "index.js"))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert loaded.stdout.strip() == "function", loaded.stderr


def test_the_node_tests_pass_against_a_live_server(live: LiveServer) -> None:
    env = clean_environment(
        MEMMACHINE_URL=live.url,
        MEMMACHINE_API_KEY="ts-key-acme",
        MEMMACHINE_OTHER_API_KEY="ts-key-globex",
    )
    output = npm("test", env=env, timeout=600)
    counts = dict(re.findall(r"^# (pass|fail|cancelled|skipped) (\d+)$", output, re.MULTILINE))
    assert counts["fail"] == "0", output[-6000:]
    assert (counts["cancelled"], counts["skipped"]) == ("0", "0"), output[-6000:]
    assert int(counts["pass"]) >= 25, output[-6000:]
    assert "ok 1 - configured from the environment" in output
