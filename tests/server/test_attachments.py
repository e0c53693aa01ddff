"""Attachments through the REST API: stored, described, found by text, downloaded and
forgotten with their blobs, on the embedded stores and the scripted model server."""

from __future__ import annotations

import base64
import hashlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from memmachine.config import AttachmentSettings, LlmSettings
from tests.fakes.llm_fixtures import llm_server  # noqa: F401  (the fixture)
from tests.fakes.llm_server import ScriptedChatServer
from tests.server.conftest import AppFactory

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(range(200)) * 3
WAV = b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(64)


def data_uri(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def blob_files(data_dir: Path) -> list[Path]:
    """Every stored blob under the data dir (holder markers aside)."""
    return [path for path in files_under(data_dir / "blobs") if path.parent.suffix != ".holders"]


def files_under(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file()] if root.exists() else []


def add(client: TestClient, user: str, *messages: dict[str, Any], session: str = "s1") -> Any:
    return client.post(
        "/v1/memories", json={"user_id": user, "session_id": session, "messages": list(messages)}
    )


def search(client: TestClient, user: str, query: str) -> list[dict[str, Any]]:
    response = client.post(
        "/v1/memories/search", json={"user_id": user, "query": query, "types": ["episodic"]}
    )
    assert response.status_code == 200, response.text
    episodes: list[dict[str, Any]] = response.json()["episodic"]
    return episodes


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def api(app_factory: AppFactory, data_dir: Path) -> TestClient:
    return app_factory(data_dir=data_dir)


def test_an_image_with_a_caption_is_found_by_text_and_forgotten_with_its_blob(
    api: TestClient, data_dir: Path
) -> None:
    image = {"data_uri": data_uri(PNG), "name": "lake.png", "caption": "our canoe on Lake Tahoe"}
    response = add(api, "ana", {"content": "look at this!", "attachments": [image]})
    assert response.status_code == 201, response.text
    text_id, image_id = response.json()["episode_ids"]

    hits = search(api, "ana", "canoe trip at Tahoe")
    assert hits
    assert hits[0]["id"] == image_id
    link = hits[0]["metadata"]["attachment"]
    assert link["mime"] == "image/png"
    assert link["size"] == len(PNG)
    assert link["sha256"] == hashlib.sha256(PNG).hexdigest()
    assert link["name"] == "lake.png"
    assert link["described_by"] == "caption"
    assert link["id"]
    assert api.get(f"/v1/memories/{text_id}", params={"user_id": "ana"}).json()["content"] == (
        "look at this!"
    )

    download = api.get(f"/v1/memories/{image_id}/attachment", params={"user_id": "ana"})
    assert download.status_code == 200
    assert download.content == PNG
    assert download.headers["content-type"] == "image/png"
    assert len(blob_files(data_dir)) == 1

    assert api.delete(f"/v1/memories/{image_id}", params={"user_id": "ana"}).status_code == 204
    assert files_under(data_dir / "blobs") == []
    assert search(api, "ana", "canoe trip at Tahoe") == [] or all(
        hit["id"] != image_id for hit in search(api, "ana", "canoe trip at Tahoe")
    )
    gone = api.get(f"/v1/memories/{image_id}/attachment", params={"user_id": "ana"})
    assert gone.status_code == 404


def test_forgetting_a_session_or_a_user_removes_their_blobs(
    api: TestClient, data_dir: Path
) -> None:
    first = {"data_uri": data_uri(PNG), "caption": "a heron"}
    second = {"data_uri": data_uri(PNG + b"2"), "caption": "a pelican"}
    assert add(api, "cy", {"content": "birds", "attachments": [first]}).status_code == 201
    assert add(api, "cy", {"content": "more", "attachments": [second]}, session="s2").status_code
    kept = add(api, "dee", {"content": "mine", "attachments": [first]})
    assert kept.status_code == 201
    assert len(blob_files(data_dir)) == 3

    assert api.delete("/v1/sessions/s1", params={"user_id": "cy"}).status_code == 200
    assert len(blob_files(data_dir)) == 2
    assert api.delete("/v1/users/cy").status_code == 200
    assert len(blob_files(data_dir)) == 1  # dee's copy of the same bytes stays
    dee_image = kept.json()["episode_ids"][1]
    download = api.get(f"/v1/memories/{dee_image}/attachment", params={"user_id": "dee"})
    assert download.content == PNG


def test_an_uploaded_file_is_stored_described_and_scoped(api: TestClient, data_dir: Path) -> None:
    response = api.post(
        "/v1/memories/attachments",
        params={"user_id": "eve", "session_id": "s1"},
        files={"file": ("receipt.png", PNG, "image/png")},
        data={"caption": "receipt from the Blue Door bakery, mail me at eve@example.com"},
    )
    assert response.status_code == 201, response.text
    (episode_id,) = response.json()["episode_ids"]
    episode = api.get(f"/v1/memories/{episode_id}", params={"user_id": "eve"}).json()
    assert "eve@example.com" not in episode["content"]  # the caption passed the write gate
    assert "Blue Door bakery" in episode["content"]
    assert search(api, "eve", "bakery receipt")[0]["id"] == episode_id

    stranger = api.get(f"/v1/memories/{episode_id}/attachment", params={"user_id": "mallory"})
    assert stranger.status_code == 404
    assert api.get(f"/v1/memories/{episode_id}/attachment", params={"user_id": "eve"}).content == (
        PNG
    )
    assert api.delete("/v1/users/eve").status_code == 200
    assert files_under(data_dir / "blobs") == []


def test_a_plain_text_document_is_indexed_by_its_text(api: TestClient) -> None:
    note = {"data_uri": data_uri(b"The boiler code is 4471.", "text/plain"), "name": "note.txt"}
    response = add(api, "fay", {"content": "my note", "attachments": [note]})
    assert response.status_code == 201, response.text
    hit = search(api, "fay", "boiler code")[0]
    assert hit["id"] == response.json()["episode_ids"][1]
    assert hit["metadata"]["attachment"]["described_by"] == "text"


@pytest.mark.parametrize(
    ("attachment", "status", "field"),
    [
        ({"data_uri": data_uri(b"x" * 2048), "caption": "big"}, 413, "data_uri"),
        ({"data_uri": data_uri(PNG, "image/tiff"), "caption": "tiff"}, 415, "mime"),
        ({"data_uri": data_uri(PNG)}, 422, "caption"),
        ({"url": "http://127.0.0.1:9/x.png", "caption": "remote"}, 422, "url"),
        ({"data_uri": "data:image/png;base64,@@@", "caption": "bad"}, 422, "data_uri"),
        ({"caption": "nothing"}, 422, None),
    ],
)
def test_a_bad_attachment_is_refused_naming_it_and_stores_nothing(
    app_factory: AppFactory,
    data_dir: Path,
    attachment: dict[str, Any],
    status: int,
    field: str | None,
) -> None:
    api = app_factory(data_dir=data_dir, attachments=AttachmentSettings(max_bytes=1024))
    response = add(api, "gus", {"content": "hello", "attachments": [attachment]})
    assert response.status_code == status, response.text
    expected = "messages.0.attachments.0" + (f".{field}" if field else "")
    assert response.json()["error"]["field"] == expected
    assert "Traceback" not in response.text
    listed = api.get("/v1/memories", params={"user_id": "gus"}).json()
    assert listed["total"] == 0
    assert blob_files(data_dir) == []


def test_an_upload_over_the_limit_is_a_413_naming_the_file(
    app_factory: AppFactory, data_dir: Path
) -> None:
    api = app_factory(data_dir=data_dir, attachments=AttachmentSettings(max_bytes=100))
    response = api.post(
        "/v1/memories/attachments",
        params={"user_id": "hal", "session_id": "s1"},
        files={"file": ("big.png", PNG, "image/png")},
        data={"caption": "too big"},
    )
    assert response.status_code == 413
    assert response.json()["error"]["field"] == "file"
    assert blob_files(data_dir) == []


def test_without_a_caption_the_vision_model_describes_the_image(
    app_factory: AppFactory,
    data_dir: Path,
    llm_server: ScriptedChatServer,  # noqa: F811
) -> None:
    api = app_factory(
        data_dir=data_dir,
        llm=LlmSettings(base_url=llm_server.base_url, model="chat", max_retries=0),
        attachments=AttachmentSettings(vision_model="seeing-model"),
    )
    llm_server.reply("A golden retriever catching a red frisbee on a sandy beach.")
    response = add(api, "ida", {"content": "weekend", "attachments": [{"data_uri": data_uri(PNG)}]})
    assert response.status_code == 201, response.text
    image_id = response.json()["episode_ids"][1]

    asked = llm_server.completions[0]
    assert asked.model == "seeing-model"
    assert asked.images == [data_uri(PNG)]
    hit = search(api, "ida", "dog with a frisbee at the beach")[0]
    assert hit["id"] == image_id
    assert hit["metadata"]["attachment"]["described_by"] == "model"


def test_audio_is_transcribed_by_the_transcription_model(
    app_factory: AppFactory,
    data_dir: Path,
    llm_server: ScriptedChatServer,  # noqa: F811
) -> None:
    api = app_factory(
        data_dir=data_dir,
        llm=LlmSettings(base_url=llm_server.base_url, model="chat", max_retries=0),
        attachments=AttachmentSettings(transcription_model="hearing-model"),
    )
    llm_server.reply("Remember to renew the passport before the trip to Lisbon.")
    response = api.post(
        "/v1/memories/attachments",
        params={"user_id": "jo", "session_id": "s1"},
        files={"file": ("memo.wav", WAV, "audio/wav")},
    )
    assert response.status_code == 201, response.text
    sent = llm_server.completions[0]
    assert sent.path.endswith("/audio/transcriptions")
    assert sent.body["model"] == "hearing-model"
    assert sent.upload == WAV
    assert search(api, "jo", "passport renewal")[0]["id"] == response.json()["episode_ids"][0]


def test_a_failing_model_stores_nothing(
    app_factory: AppFactory,
    data_dir: Path,
    llm_server: ScriptedChatServer,  # noqa: F811
) -> None:
    from tests.fakes.llm_server import Reply

    api = app_factory(
        data_dir=data_dir,
        llm=LlmSettings(base_url=llm_server.base_url, model="chat", max_retries=0, api_key="sk-x"),
        attachments=AttachmentSettings(vision_model="seeing-model"),
    )
    llm_server.reply(Reply(status=500))
    response = add(api, "kim", {"content": "pic", "attachments": [{"data_uri": data_uri(PNG)}]})
    assert response.status_code == 503
    assert "sk-x" not in response.text
    assert api.get("/v1/memories", params={"user_id": "kim"}).json()["total"] == 0
    assert blob_files(data_dir) == []


@pytest.fixture
def image_host() -> Iterator[str]:
    """A loopback HTTP server serving PNG at /cat.png (and 404 elsewhere)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != "/cat.png":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", str(len(PNG)))
            self.end_headers()
            self.wfile.write(PNG)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_url_is_fetched_only_when_allowed_and_from_allowed_hosts(
    app_factory: AppFactory, data_dir: Path, image_host: str
) -> None:
    api = app_factory(
        data_dir=data_dir,
        attachments=AttachmentSettings(fetch_urls=True, url_hosts=["127.0.0.1"]),
    )
    cat = {"url": f"{image_host}/cat.png", "caption": "a sleeping tabby cat"}
    response = add(api, "lu", {"content": "cat", "attachments": [cat]})
    assert response.status_code == 201, response.text
    image_id = response.json()["episode_ids"][1]
    assert api.get(f"/v1/memories/{image_id}/attachment", params={"user_id": "lu"}).content == PNG

    missing = add(api, "lu", {"content": "x", "attachments": [{**cat, "url": f"{image_host}/no"}]})
    assert missing.status_code == 422
    assert missing.json()["error"]["field"] == "messages.0.attachments.0.url"
    elsewhere = {**cat, "url": image_host.replace("127.0.0.1", "localhost") + "/cat.png"}
    refused = add(api, "lu", {"content": "x", "attachments": [elsewhere]})
    assert refused.status_code == 422


def test_a_broken_upload_is_a_422_naming_what_is_wrong(api: TestClient, data_dir: Path) -> None:
    where = {"user_id": "max", "session_id": "s1"}
    broken = api.post(
        "/v1/memories/attachments",
        params=where,
        content=b"not multipart at all",
        headers={"content-type": "multipart/form-data; boundary=xyz"},
    )
    assert broken.status_code == 422
    assert broken.json()["error"]["field"] == "body"
    nul = api.post(
        "/v1/memories/attachments",
        params=where,
        files={"file": ("a.txt", b"hi", "text/plain")},
        data={"caption": "a\x00b"},
    )
    assert nul.status_code == 422
    assert nul.json()["error"]["field"] == "caption"
    empty = api.post("/v1/memories/attachments", params=where, files={"file": ("a.txt", b"")})
    assert empty.status_code == 422
    assert empty.json()["error"]["field"] == "file"
    assert files_under(data_dir / "blobs") == []
