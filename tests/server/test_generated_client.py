"""A client generated from the served ``/openapi.json`` by an established generator
(openapi-python-client) works: against a live ``memmachine serve`` with an API key made by
``memmachine keys create``, it adds and searches one named user's memories, names the user
by body, query or header, and reads each error as the documented error body."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.live import LiveServer, clean_environment, serve

GENERATOR = Path(sys.executable).with_name("openapi-python-client")

CALLS = r"""
import json, sys
from memmachine_client import AuthenticatedClient, Client
from memmachine_client.api.memories import add_memories, list_memories, search_memories
from memmachine_client.api.profile import get_profile, set_profile
from memmachine_client.models import (
    AddMemoriesRequest, AddMemoriesResponse, ErrorBody, FactIn, MessageIn, SearchRequest,
    SetProfileRequest,
)

url, key = sys.argv[1], sys.argv[2]
# raise_on_unexpected_status: a status the document does not list raises
client = AuthenticatedClient(base_url=url, token=key, raise_on_unexpected_status=True)
added = add_memories.sync(client=client, body=AddMemoriesRequest(
    user_id="ana", session_id="vet",
    messages=[MessageIn(content="My beagle Toast sees the vet on Thursday"),
              MessageIn(content="I need to buy tomatoes for the sauce")],
))
assert isinstance(added, AddMemoriesResponse), added
found = search_memories.sync(
    client=client, body=SearchRequest(user_id="ana", query="when does the beagle see the vet")
)
stranger = search_memories.sync(client=client, body=SearchRequest(user_id="ben", query="beagle"))
by_header = list_memories.sync(client=client, x_user_id="ana")
by_query = list_memories.sync(client=client, user_id="ana", x_user_id="ben")
set_profile.sync(client=client, body=SetProfileRequest(
    user_id="ana", facts=[FactIn(tag="pets", feature="dog", value="beagle named Toast")]
))
facts = get_profile.sync(client=client, x_user_id="ana")

missing_user = list_memories.sync(client=client)
anonymous = search_memories.sync(
    client=Client(base_url=url, raise_on_unexpected_status=True),
    body=SearchRequest(user_id="ana", query="beagle"),
)
wrong_key = list_memories.sync_detailed(
    client=AuthenticatedClient(base_url=url, token="not-a-key"), user_id="ana"
)
assert isinstance(missing_user, ErrorBody) and isinstance(anonymous, ErrorBody)
print(json.dumps({
    "added": len(added.episode_ids),
    "found": [hit.content for hit in found.episodic],
    "stranger": [hit.content for hit in stranger.episodic],
    "by_header": by_header.total,
    "by_query": by_query.total,
    "facts": [fact.value for fact in facts.facts],
    "missing_user": [missing_user.error.code, missing_user.error.field],
    "anonymous": anonymous.error.code,
    "wrong_key": [wrong_key.status_code, wrong_key.parsed.error.code],
}))
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, str]]:
    tmp = tmp_path_factory.mktemp("generated")
    env = clean_environment(
        MEMMACHINE_DATA_DIR=str(tmp / "data"), MEMMACHINE_EMBEDDING_PROVIDER="none"
    )
    created = subprocess.run(
        [sys.executable, "-m", "memmachine_server.cli", "keys", "create", "--tenant", "acme"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    key = created.stdout.strip().splitlines()[-1]
    with serve(tmp, env) as live:
        yield live, key


def test_a_generated_client_adds_and_searches_a_named_users_memories(
    server: tuple[LiveServer, str], tmp_path: Path
) -> None:
    live, key = server
    document = tmp_path / "openapi.json"
    document.write_text(httpx.get(live.url + "/openapi.json", timeout=10).text)
    env = {**os.environ, "PATH": f"{GENERATOR.parent}{os.pathsep}{os.environ['PATH']}"}
    generated = subprocess.run(
        [str(GENERATOR), "generate", "--path", str(document), "--output-path", "client"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = generated.stdout + generated.stderr
    assert generated.returncode == 0, output
    assert "Warning" not in output, output  # every part of the document was understood
    package = tmp_path / "client"
    assert (package / "memmachine_client" / "api" / "memories" / "add_memories.py").is_file()

    result = subprocess.run(
        [sys.executable, "-c", CALLS, live.url, key],
        env={**env, "PYTHONPATH": str(package)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["added"] == 2
    assert seen["found"][0] == "My beagle Toast sees the vet on Thursday"
    assert seen["stranger"] == []
    assert (seen["by_header"], seen["by_query"]) == (2, 2)  # the query wins over the header
    assert seen["facts"] == ["beagle named Toast"]
    assert seen["missing_user"] == ["invalid_input", "user_id"]
    assert seen["anonymous"] == "unauthenticated"
    assert seen["wrong_key"] == [401, "unauthenticated"]
