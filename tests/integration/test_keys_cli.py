"""``memmachine keys`` as a real process on a data dir, and a server on the same data dir
that accepts, lists and (after revocation) refuses those keys; ``memmachine serve`` refusing
to run open on a non-loopback address."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from fastapi.testclient import TestClient

from memmachine.config import EmbeddingSettings
from memmachine_server.app import create_app
from tests.server.conftest import LOCAL, make_settings


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMMACHINE_")}
    env.update(extra)
    return env


def keys(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memmachine_server.cli", "keys", *args, "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
        check=False,
    )


def create_key(data_dir: Path, *args: str) -> str:
    done = keys(data_dir, "create", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def remember(app: TestClient, key: str | None, text: str) -> int:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {"user_id": "ana", "session_id": "s1", "messages": [{"content": text}]}
    return app.post("/v1/memories", json=body, headers=headers).status_code


def test_a_cli_key_works_on_the_server_lists_and_revokes(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    key = create_key(data_dir, "--tenant", "acme", "--name", "deploy bot")
    assert key.startswith("mm_")
    key_id = key.split("_")[1]

    settings = make_settings(
        data_dir, embedding=EmbeddingSettings(provider="none"), key_refresh_seconds=0.2
    )
    with TestClient(create_app(settings), raise_server_exceptions=False, base_url=LOCAL) as app:
        assert remember(app, key, "stored with a CLI key") == 201
        assert remember(app, None, "no key") == 401  # a key exists: auto mode requires keys

        # The CLI works while the server holds the data dir, and the server takes a new
        # key at once.
        reader = create_key(data_dir, "--tenant", "acme", "--read-only", "--rate-limit", "5")
        listed = app.get(
            "/v1/memories", params={"user_id": "ana"}, headers={"Authorization": f"Bearer {reader}"}
        )
        assert [e["content"] for e in listed.json()["episodes"]] == ["stored with a CLI key"]
        assert remember(app, reader, "read-only") == 403

        table = keys(data_dir, "list")
        assert table.returncode == 0, table.stderr
        lines = table.stdout.strip().splitlines()
        assert lines[0].split()[:3] == ["ID", "TENANT", "NAME"]
        row = next(line for line in lines if line.startswith(key_id))
        assert "acme" in row
        assert "deploy bot" in row
        assert "read,write" in row
        reader_row = next(line for line in lines if line.startswith(reader.split("_")[1]))
        assert "read " in reader_row
        assert "5/min" in reader_row
        assert key.split("_", 2)[2] not in table.stdout
        assert reader not in table.stdout

        revoked = keys(data_dir, "revoke", key_id)
        assert revoked.returncode == 0, revoked.stderr
        assert f"revoked {key_id}" in revoked.stdout
        deadline = time.monotonic() + 30
        while remember(app, key, "after revocation") != 401:
            assert time.monotonic() < deadline, "the revoked key was still accepted"
            time.sleep(0.1)
        after = keys(data_dir, "list", "--tenant", "acme").stdout
        revoked_row = next(line for line in after.splitlines() if line.startswith(key_id))
        assert revoked_row.rstrip().split()[-1] != "-"  # the REVOKED column has a time


def test_bad_input_is_one_line_and_stores_nothing(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    bad = keys(data_dir, "create", "--tenant", "no spaces please")
    assert bad.returncode == 1
    assert bad.stderr.strip().count("\n") == 0
    assert "--tenant" in bad.stderr
    assert "Traceback" not in bad.stderr
    listed = keys(data_dir, "list")
    assert listed.returncode == 0
    assert len(listed.stdout.strip().splitlines()) == 1  # the header only

    missing = keys(data_dir, "revoke", "0123456789abcdef")
    assert missing.returncode == 1
    assert "not found" in missing.stderr
    assert "Traceback" not in missing.stderr


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_serve_refuses_to_run_open_on_a_public_address(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "memmachine_server.cli",
            "serve",
            "--host",
            "0.0.0.0",
            "--port",
            str(_free_port()),
            "--data-dir",
            str(tmp_path / "data"),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env=_env(MEMMACHINE_EMBEDDING_PROVIDER="none"),
        check=False,
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("memmachine: cannot start: refusing to serve without authentication")
    assert "MEMMACHINE_AUTH=off" in last
    assert "memmachine keys create" in last
