"""A stranger's install: the three wheels (memmachine-core, memmachine-service,
memmachine-sdk) are built from the checkout and installed with their locked dependencies
into a fresh virtualenv, outside the repository. From there the ``memmachine`` command
exists, serves, answers /health and stores and finds memories through the installed SDK;
nothing of torch came along.

It runs the README's Install commands with ``uv`` in place of ``pip``, offline: the
dependencies come from uv's cache, filled by ``uv sync`` (``.ci/run`` runs it first), at
the versions of ``uv.lock``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from zipfile import ZipFile

import pytest

from tests.conftest import REPO_ROOT, unavailable
from tests.live import clean_environment, serve

DISTRIBUTIONS = {
    "memmachine_core": "memmachine",
    "memmachine_service": "memmachine_server",
    "memmachine_sdk": "memmachine_sdk",
}


@dataclass
class Installed:
    wheels: list[Path]
    venv: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"


def uv(*args: str, cwd: Path = REPO_ROOT) -> str:
    result = subprocess.run(
        ["uv", *args], cwd=cwd, capture_output=True, text=True, timeout=600, check=False
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    if shutil.which("uv") is None:
        unavailable("uv is not on PATH")
    tmp = tmp_path_factory.mktemp("wheels")
    dist = tmp / "dist"
    uv("build", "--all-packages", "--wheel", "--offline", "--out-dir", str(dist))
    wheels = sorted(dist.glob("*.whl"))
    requirements = tmp / "requirements.txt"
    uv(
        "export",
        "--frozen",
        "--no-dev",
        "--no-emit-workspace",
        "--no-hashes",
        "--package",
        "memmachine-service",
        "--output-file",
        str(requirements),
    )
    venv = tmp / "venv"
    uv("venv", "--offline", "--python", sys.executable, str(venv), cwd=tmp)
    python = str(venv / "bin" / "python")
    # --no-deps: every dependency is pinned by the lock already (checked below)
    install = ["pip", "install", "--offline", "--no-deps", "--python", python]
    uv(*install, "-r", str(requirements), *map(str, wheels), cwd=tmp)
    return Installed(wheels, venv)


def test_a_wheel_for_each_package_with_license_and_type_marker(installed: Installed) -> None:
    names = {wheel.name.split("-")[0]: wheel for wheel in installed.wheels}
    assert set(names) == set(DISTRIBUTIONS)
    for dist, package in DISTRIBUTIONS.items():
        with ZipFile(names[dist]) as wheel:
            files = set(wheel.namelist())
            metadata = wheel.read(f"{dist}-0.1.0.dist-info/METADATA").decode()
        assert f"{package}/py.typed" in files, dist
        assert f"{dist}-0.1.0.dist-info/licenses/LICENSE" in files, dist
        assert "License-Expression: Apache-2.0" in metadata
        assert not [name for name in files if name.startswith(("tests/", "bench/", "examples/"))]


def test_the_installed_environment_is_complete_and_torch_free(installed: Installed) -> None:
    python = str(installed.python)
    uv("pip", "check", "--offline", "--python", python)  # every declared dependency is met
    listed = json.loads(uv("pip", "list", "--format", "json", "--python", python))
    names = {item["name"].lower() for item in listed}
    assert {"memmachine-core", "memmachine-service", "memmachine-sdk"} <= names
    assert not {"torch", "sentence-transformers"} & names
    assert not [name for name in names if name.startswith("nvidia-")]
    assert not {"pytest", "ruff", "mypy"} & names  # a non-dev install


def test_the_cli_is_installed_and_reports_its_version(installed: Installed, tmp_path: Path) -> None:
    command = installed.venv / "bin" / "memmachine"
    assert command.is_file()
    result = subprocess.run(
        [str(command), "version"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert (result.returncode, result.stdout.strip()) == (0, "0.1.0"), result.stderr


def test_the_installed_server_serves_and_the_installed_sdk_talks_to_it(
    installed: Installed, tmp_path: Path
) -> None:
    env = clean_environment(
        MEMMACHINE_DATA_DIR=str(tmp_path / "data"),
        MEMMACHINE_EMBEDDING_PROVIDER="none",
        MEMMACHINE_API_KEYS="wheel-key=acme",
        PYTHONNOUSERSITE="1",
    )
    env.pop("PYTHONPATH", None)
    with serve(tmp_path, env, command=[str(installed.venv / "bin" / "memmachine")]) as server:
        script = f"""
import memmachine_sdk, memmachine_server
assert "/venv/" in memmachine_sdk.__file__ and "/venv/" in memmachine_server.__file__
from memmachine_sdk import Client
with Client({server.url!r}, api_key="wheel-key") as mm:
    health = mm.health()
    chat = mm.memory(user_id="ana", session_id="s1")
    chat.add("My beagle Toast sees the vet on Thursday")
    print(health.status, health.version, chat.search("beagle vet").episodic[0].content)
"""
        result = subprocess.run(
            [str(installed.python), "-c", script],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "ok 0.1.0 My beagle Toast sees the vet on Thursday"
