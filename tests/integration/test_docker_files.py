"""docker/ checked without a Docker engine: the compose file's shape, its variables against
Settings, the images' install commands against the lock file, and the entrypoint script run
with a fake command."""

from __future__ import annotations

import http.server
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import threading
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from memmachine.config import CONFIG_FILE_VARIABLE, Settings, resolve_credentials
from tests.conftest import REPO_ROOT
from tests.services import NEO4J_VERSION, free_port

DOCKER = REPO_ROOT / "docker"
ENTRYPOINT = DOCKER / "entrypoint.sh"


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    return data


def settings_variables() -> set[str]:
    """Every environment variable Settings reads (top level and sections)."""
    names = {CONFIG_FILE_VARIABLE}
    for name, info in Settings.model_fields.items():
        section = info.annotation
        if isinstance(section, type) and hasattr(section, "model_config"):
            prefix = str(section.model_config.get("env_prefix", ""))
            names |= {f"{prefix}{inner}".upper() for inner in section.model_fields}
        else:
            names.add(f"MEMMACHINE_{name}".upper())
    return names


# --------------------------------------------------------------------------- compose.yaml


def test_compose_runs_neo4j_with_the_settings_a_forget_needs() -> None:
    """The settings under which the forget scan finds nothing in Neo4j's files
    (tests/faults/test_forget_scan.py), as the image's NEO4J_ variables spell them
    (``.`` is ``_``, ``_`` is ``__``)."""
    from tests.faults.test_forget_scan import NEO4J_FORGET_SETTINGS

    environment = compose()["services"]["neo4j"]["environment"]
    configured = {
        "_".join(part.replace("_", ".") for part in name.removeprefix("NEO4J_").split("__")): str(
            value
        )
        for name, value in environment.items()
    }
    assert {k: configured.get(k) for k in NEO4J_FORGET_SETTINGS} == NEO4J_FORGET_SETTINGS


def test_compose_has_the_four_services_with_health_checks_and_volumes() -> None:
    services = compose()["services"]
    assert set(services) == {"neo4j", "postgres", "redis", "memmachine"}
    assert services["neo4j"]["image"].startswith("neo4j:5")
    assert services["postgres"]["image"] == "pgvector/pgvector:pg16"
    assert services["redis"]["image"].startswith("redis:7")
    for name, service in services.items():
        check = service["healthcheck"]
        assert check["test"][0] in ("CMD", "CMD-SHELL"), name
        assert {"interval", "timeout", "retries"} <= set(check), name
        assert service.get("volumes"), name
    assert "cypher-shell" in " ".join(services["neo4j"]["healthcheck"]["test"])
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])
    assert "redis-cli ping" in " ".join(services["redis"]["healthcheck"]["test"])
    assert "NEO4J_AUTH" in services["neo4j"]["environment"]
    declared = set(compose()["volumes"])
    for service in services.values():
        for volume in service["volumes"]:
            source = volume.split(":", 1)[0]
            assert source in declared


def test_memmachine_waits_for_healthy_stores_and_points_at_them() -> None:
    service = compose()["services"]["memmachine"]
    assert service["depends_on"] == {
        name: {"condition": "service_healthy"} for name in ("neo4j", "postgres", "redis")
    }
    env = service["environment"]
    assert env["MEMMACHINE_EPISODE_STORE_URL"].startswith("neo4j://neo4j:7687")
    assert env["MEMMACHINE_PROFILE_STORE_URL"].startswith("postgresql+psycopg://")
    assert "@postgres:5432/" in env["MEMMACHINE_PROFILE_STORE_URL"]
    assert env["MEMMACHINE_WORKING_STORE_URL"].startswith("redis://redis:6379")
    # passwords come from their own variables, not from the URLs
    for url in ("EPISODE", "PROFILE", "WORKING"):
        assert resolve_credentials(env[f"MEMMACHINE_{url}_STORE_URL"]).password is None
        assert env[f"MEMMACHINE_{url}_STORE_PASSWORD"]
    assert float(env["MEMMACHINE_STARTUP_TIMEOUT_SECONDS"]) > 0
    assert service["build"] == {"context": "..", "dockerfile": "docker/Dockerfile"}
    assert (REPO_ROOT / "docker" / "Dockerfile").is_file()


def test_every_memmachine_variable_in_compose_is_a_setting() -> None:
    known = settings_variables()
    env = compose()["services"]["memmachine"]["environment"]
    unknown = {name for name in env if name.startswith("MEMMACHINE_")} - known
    assert not unknown, f"compose sets variables Settings does not read: {unknown}"
    assert {
        "MEMMACHINE_EPISODE_STORE_USER",
        "MEMMACHINE_EPISODE_STORE_PASSWORD",
        "MEMMACHINE_PROFILE_STORE_PASSWORD",
        "MEMMACHINE_WORKING_STORE_PASSWORD",
        "MEMMACHINE_STARTUP_TIMEOUT_SECONDS",
        "MEMMACHINE_STARTUP_BACKOFF_BASE_SECONDS",
        "MEMMACHINE_STARTUP_BACKOFF_MAX_SECONDS",
    } <= known


def test_compose_passwords_agree_between_services() -> None:
    services = compose()["services"]
    env = services["memmachine"]["environment"]
    neo4j_password = services["neo4j"]["environment"]["NEO4J_AUTH"].split("/", 1)[1]
    assert env["MEMMACHINE_EPISODE_STORE_PASSWORD"] == neo4j_password
    assert env["MEMMACHINE_EPISODE_STORE_USER"] == "neo4j"
    postgres = services["postgres"]["environment"]
    assert env["MEMMACHINE_PROFILE_STORE_PASSWORD"] == postgres["POSTGRES_PASSWORD"]
    assert f"//{postgres['POSTGRES_USER']}@" in env["MEMMACHINE_PROFILE_STORE_URL"]
    assert env["MEMMACHINE_PROFILE_STORE_URL"].endswith(f"/{postgres['POSTGRES_DB']}")
    assert env["MEMMACHINE_WORKING_STORE_PASSWORD"] in services["redis"]["command"]


def test_compose_runs_the_neo4j_the_tests_run_without_plugins() -> None:
    """The image's major.minor is the one tests/neo4j pins, community edition, and no
    plugin is installed (the code uses only built-in procedures and indexes)."""
    neo4j = compose()["services"]["neo4j"]
    major_minor = ".".join(NEO4J_VERSION.split(".")[:2])
    assert neo4j["image"] == f"neo4j:{major_minor}-community"
    environment = neo4j["environment"]
    assert not {"NEO4J_PLUGINS", "NEO4JLABS_PLUGINS"} & set(environment)
    # settings the image turns into neo4j.conf entries: server.* and db.* names of Neo4j 5
    for name in environment:
        if name not in ("NEO4J_AUTH",):
            assert name.startswith(("NEO4J_server_", "NEO4J_db_")), name


def test_neo4j_health_check_queries_bolt_with_the_password_from_its_environment(
    tmp_path: Path,
) -> None:
    """The check runs cypher-shell (a query over Bolt, so healthy means the database
    answers) with the password taken from NEO4J_AUTH inside the container, never written in
    the rendered configuration. Run here through sh, as Docker would, with a stand-in
    cypher-shell that records its arguments."""
    check = compose()["services"]["neo4j"]["healthcheck"]
    kind, command = check["test"]
    assert kind == "CMD-SHELL"
    assert "memmachine-dev-password" not in command
    rendered = command.replace("$$", "$")  # compose's interpolation of an escaped $
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "cypher-shell").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$ARGS_FILE"\n')
    (fake / "cypher-shell").chmod(0o755)
    env = {
        "PATH": f"{fake}:{os.environ['PATH']}",
        "NEO4J_AUTH": "neo4j/pa ss$word",
        "ARGS_FILE": str(tmp_path / "args"),
    }
    done = subprocess.run(["sh", "-c", rendered], env=env, check=False)
    assert done.returncode == 0
    args = (tmp_path / "args").read_text().splitlines()
    assert args[args.index("-u") + 1] == "neo4j"
    assert args[args.index("-p") + 1] == "pa ss$word"
    assert args[args.index("-a") + 1] == "bolt://localhost:7687"
    assert args[-1] == "RETURN 1"
    (fake / "cypher-shell").write_text("#!/bin/sh\nexit 1\n")
    assert subprocess.run(["sh", "-c", rendered], env=env, check=False).returncode == 1
    # a database still starting gets the check's grace period and enough retries
    assert _seconds(check["start_period"]) >= 30
    assert _seconds(check["interval"]) * check["retries"] >= 120


def _docker_match(pattern: str, path: str) -> bool:
    """Docker's .dockerignore matching of one pattern against one path: Go's
    ``filepath.Match`` (``*`` and ``?`` stay within a path segment) plus ``**`` for any
    number of segments."""
    regex = ""
    index = 0
    while index < len(pattern):
        if pattern.startswith("**/", index):
            regex += "(?:.*/)?"
            index += 3
        elif pattern.startswith("**", index):
            regex += ".*"
            index += 2
        elif pattern[index] == "*":
            regex += "[^/]*"
            index += 1
        elif pattern[index] == "?":
            regex += "[^/]"
            index += 1
        else:
            regex += re.escape(pattern[index])
            index += 1
    return re.fullmatch(regex, path) is not None


def _seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    for unit in sorted(units, key=len, reverse=True):
        if duration.endswith(unit):
            return float(duration[: -len(unit)]) * units[unit]
    raise AssertionError(f"not a compose duration: {duration}")


# --------------------------------------------------------------------------- the images


def test_images_install_the_server_from_the_lock_and_use_the_entrypoint() -> None:
    cpu = (DOCKER / "Dockerfile").read_text()
    gpu = (DOCKER / "Dockerfile.gpu").read_text()
    assert "uv sync --locked --no-dev --package memmachine-service --extra s3\n" in cpu
    assert "--extra gpu" not in cpu
    assert "uv sync --locked --no-dev --package memmachine-service --extra gpu --extra s3" in gpu
    assert "nvidia/cuda:" in gpu
    for text in (cpu, gpu):
        # the packages' metadata names LICENSE (server/ and sdk/ link to it)
        assert "COPY pyproject.toml uv.lock README.md LICENSE ./" in text
        assert "COPY docker/entrypoint.sh /usr/local/bin/memmachine-entrypoint" in text
        assert 'ENTRYPOINT ["memmachine-entrypoint"]' in text
        assert 'CMD ["memmachine", "serve"]' in text


def test_the_health_checks_follow_the_configured_port() -> None:
    """Neither image nor compose hard-codes the port: both run the image's check, which
    asks MEMMACHINE_PORT (the images set it; compose sets the same value)."""
    for name in ("Dockerfile", "Dockerfile.gpu"):
        text = (DOCKER / name).read_text()
        check = [line for line in text.splitlines() if line.startswith("HEALTHCHECK")]
        assert len(check) == 1, name
        assert check[0].endswith('CMD ["memmachine-healthcheck"]'), name
        assert "COPY docker/healthcheck.py /usr/local/bin/memmachine-healthcheck" in text
        assert "MEMMACHINE_PORT=8080" in text
        assert "8080/health" not in text
    service = compose()["services"]["memmachine"]
    assert service["healthcheck"]["test"] == ["CMD", "memmachine-healthcheck"]
    assert service["ports"] == [f"127.0.0.1:8080:{service['environment']['MEMMACHINE_PORT']}"]


@pytest.mark.parametrize(
    ("environ", "url"),
    [
        ({}, "http://127.0.0.1:8080/health"),
        ({"MEMMACHINE_HOST": "0.0.0.0", "MEMMACHINE_PORT": "9123"}, "http://127.0.0.1:9123/health"),
        ({"MEMMACHINE_HOST": "::", "MEMMACHINE_PORT": "9"}, "http://127.0.0.1:9/health"),
        ({"MEMMACHINE_HOST": "10.1.2.3"}, "http://10.1.2.3:8080/health"),
        ({"MEMMACHINE_HOST": "::1", "MEMMACHINE_PORT": "81"}, "http://[::1]:81/health"),
    ],
)
def test_health_check_url(environ: dict[str, str], url: str) -> None:
    spec = importlib.util.spec_from_file_location("healthcheck", DOCKER / "healthcheck.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.health_url(environ) == url


def test_health_check_passes_only_on_a_200_from_the_configured_port() -> None:
    """The script run as the image runs it, against a loopback server on a free port."""
    statuses = {"code": 200}

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            code = statuses["code"] if self.path == "/health" else 404
            self.send_response(code)
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def check(port: int) -> int:
        env = {"PATH": os.environ["PATH"], "MEMMACHINE_HOST": "0.0.0.0"}
        env["MEMMACHINE_PORT"] = str(port)
        done = subprocess.run(
            [sys.executable, str(DOCKER / "healthcheck.py")], env=env, timeout=30, check=False
        )
        return done.returncode

    try:
        port = server.server_address[1]
        assert check(port) == 0
        statuses["code"] = 503
        assert check(port) == 1
        statuses["code"] = 200
        assert check(free_port()) == 1  # nothing listens there
    finally:
        server.shutdown()
        server.server_close()


def test_the_gpu_base_image_has_the_cuda_major_the_locked_torch_is_built_for() -> None:
    """torch from PyPI brings CUDA libraries of one major (nvidia-cuda-runtime in the lock);
    the base image declares the CUDA it needs from the driver. They must agree, or a host
    with an older driver runs torch on the CPU without a word."""
    lock = tomllib.loads((REPO_ROOT / "uv.lock").read_text())
    packages = {package["name"]: package for package in lock["package"]}
    torch_deps = {dep["name"] for dep in packages["torch"].get("dependencies", [])}
    assert "cuda-toolkit" in torch_deps or any(name.startswith("nvidia-") for name in torch_deps)
    runtime = packages["nvidia-cuda-runtime"]["version"]
    gpu = (DOCKER / "Dockerfile.gpu").read_text()
    match = re.search(r"ARG CUDA_IMAGE=nvidia/cuda:(\d+)\.(\d+)\.\d+-runtime-ubuntu", gpu)
    assert match is not None
    assert match.group(1) == runtime.split(".")[0], (match.group(0), runtime)


def test_the_build_context_holds_only_what_the_images_copy() -> None:
    """.dockerignore (read with Docker's rules: the last matching line wins, a line that
    matches a directory covers what is under it) lets in exactly the files the Dockerfiles
    COPY, without caches; the git history, environments, data and tests stay out."""
    rules = []
    for line in (REPO_ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            rules.append((line.startswith("!"), line.lstrip("!")))

    def ignored(path: str) -> bool:
        parts = path.split("/")
        prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
        verdict = False
        for negated, pattern in rules:
            if any(_docker_match(pattern, prefix) for prefix in prefixes):
                verdict = not negated
        return verdict

    copied: list[str] = []
    for name in ("Dockerfile", "Dockerfile.gpu"):
        for line in (DOCKER / name).read_text().splitlines():
            if line.startswith("COPY "):
                copied += line.split()[1:-1]
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    sent = {path for path in tracked if not ignored(path)}
    wanted = {
        path for path in tracked if any(path == c or path.startswith(f"{c}/") for c in copied)
    }
    assert sent == wanted
    for path in (
        ".git/config",
        ".venv/bin/python",
        ".memmachine/profile.db",
        "memmachine/__pycache__/x.cpython-311.pyc",
        "tests/conftest.py",
        "server/.venv/lib/x.py",
    ):
        assert ignored(path), path


@pytest.mark.skipif(shutil.which("uv") is None, reason="uv is not on PATH")
@pytest.mark.parametrize("package", ["memmachine-service", "memmachine-core"])
def test_the_default_install_has_no_torch_and_the_gpu_extra_has_it(package: str) -> None:
    """For the image (the service) and for ``uv sync [--extra gpu]`` in a checkout (the
    workspace root, the core)."""
    default = locked_packages(package)
    assert "torch" not in default
    assert "sentence-transformers" not in default
    assert not [name for name in default if name.startswith("nvidia-")]
    gpu = locked_packages(package, "--extra", "gpu")
    assert {"torch", "sentence-transformers"} <= gpu


def locked_packages(package: str, *extra: str) -> set[str]:
    """The distributions ``uv sync --no-dev --package package [extra]`` installs."""
    result = subprocess.run(
        ["uv", "export", "--locked", "--no-dev", "--no-hashes", "--package", package, *extra],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return {
        line.split("==")[0].strip().lower()
        for line in result.stdout.splitlines()
        if "==" in line and not line.startswith("#")
    }


@pytest.mark.skipif(shutil.which("uv") is None, reason="uv is not on PATH")
@pytest.mark.parametrize("package", ["memmachine-service", "memmachine-core"])
def test_the_default_install_has_no_aws_client_and_the_s3_extra_has_it(package: str) -> None:
    """The S3 blob store is optional: ``boto3`` comes only with the ``s3`` extra."""
    assert not {"boto3", "botocore", "moto"} & locked_packages(package)
    with_s3 = locked_packages(package, "--extra", "s3")
    assert {"boto3", "botocore"} <= with_s3
    assert "moto" not in with_s3


# --------------------------------------------------------------------------- entrypoint


def run_entrypoint(
    *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {"PATH": os.environ["PATH"]}
    return subprocess.run(
        ["sh", str(ENTRYPOINT), *args],
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_entrypoint_execs_the_given_command() -> None:
    result = run_entrypoint("sh", "-c", 'echo "ran $0 $#"; exit 3', "x")
    assert (result.returncode, result.stdout.strip()) == (3, "ran x 0")


def test_entrypoint_reads_file_variables_as_docker_secrets(tmp_path: Path) -> None:
    secret = tmp_path / "neo4j_password"
    secret.write_text("s3cr3t with spaces\n")
    result = run_entrypoint(
        "sh",
        "-c",
        'printf "%s|%s" "$MEMMACHINE_EPISODE_STORE_PASSWORD" '
        '"${MEMMACHINE_EPISODE_STORE_PASSWORD_FILE-unset}"',
        env={"MEMMACHINE_EPISODE_STORE_PASSWORD_FILE": str(secret)},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "s3cr3t with spaces|unset"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"MEMMACHINE_API_KEYS": "a=b", "MEMMACHINE_API_KEYS_FILE": "/dev/null"},
            "both MEMMACHINE_API_KEYS and MEMMACHINE_API_KEYS_FILE are set",
        ),
        ({"MEMMACHINE_API_KEYS_FILE": "/nonexistent/x"}, "cannot read /nonexistent/x"),
        ({"MEMMACHINE_CONFIG": "/nonexistent/c.yaml"}, "MEMMACHINE_CONFIG: cannot read"),
    ],
)
def test_entrypoint_refuses_unusable_variables(env: dict[str, str], message: str) -> None:
    result = run_entrypoint("true", env=env)
    assert result.returncode == 64
    assert message in result.stderr


def test_entrypoint_passes_options_to_memmachine_serve(tmp_path: Path) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "memmachine").write_text('#!/bin/sh\necho "memmachine $*"\n')
    (fake / "memmachine").chmod(0o755)
    path = f"{fake}:{os.environ['PATH']}"
    assert run_entrypoint("--port", "9000", env={"PATH": path}).stdout == (
        "memmachine serve --port 9000\n"
    )
    assert run_entrypoint(env={"PATH": path}).stdout == "memmachine serve\n"
