"""Attachments kept in an S3-compatible bucket (``MEMMACHINE_BLOB_URL``) through the REST
API, against moto's S3 server started by the tests: stored, downloaded and forgotten with
the user, the bucket listed directly; an endpoint that goes away is a 503 and a missing
bucket stops the server naming the setting."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from memmachine.config import BlobSettings
from memmachine.errors import ConfigurationError, StoreUnavailableError
from memmachine_server.app import create_app
from tests.s3 import REGION, S3_KEYS, all_keys, new_bucket
from tests.server.conftest import LOCAL, AppFactory, make_settings
from tests.server.test_attachments import PNG, add, data_uri, files_under
from tests.server.test_bad_input import error_of
from tests.services import MotoServer, free_port


def blob_settings(endpoint: str, bucket: str) -> BlobSettings:
    return BlobSettings(
        url=f"s3://{bucket}/memmachine/blobs",
        endpoint_url=endpoint,
        region=REGION,
        path_style=True,
        **S3_KEYS,
    )


def user_prefix(before: set[str], after: list[str]) -> str:
    """The key prefix the objects new since ``before`` share (one user's)."""
    new = [key for key in after if key not in before]
    assert new
    prefixes = {"/".join(key.split("/")[:6]) + "/" for key in new}
    assert len(prefixes) == 1, prefixes
    return prefixes.pop()


def test_attachments_live_in_the_bucket_and_go_with_the_user(
    app_factory: AppFactory, s3_endpoint_url: str, unique: str, tmp_path: Path
) -> None:
    bucket = new_bucket(s3_endpoint_url, unique)
    data_dir = tmp_path / "data"
    api = app_factory(data_dir=data_dir, blob=blob_settings(s3_endpoint_url, bucket))
    image = {"data_uri": data_uri(PNG), "name": "lake.png", "caption": "our canoe on Lake Tahoe"}

    response = add(api, "ana.lopez", {"content": "look!", "attachments": [image]})
    assert response.status_code == 201, response.text
    image_id = response.json()["episode_ids"][1]
    ana = user_prefix(set(), all_keys(s3_endpoint_url, bucket))
    other = {"data_uri": data_uri(PNG + b"2"), "caption": "a pelican"}
    assert add(api, "ana.lopez", {"content": "and", "attachments": [other]}).status_code == 201
    before_ben = set(all_keys(s3_endpoint_url, bucket))
    assert add(api, "ben", {"content": "mine", "attachments": [image]}).status_code == 201
    ben = user_prefix(before_ben, all_keys(s3_endpoint_url, bucket))

    keys = all_keys(s3_endpoint_url, bucket)
    assert ana != ben
    assert all(key.startswith("memmachine/blobs/") for key in keys)
    assert not any("ana" in key or "lopez" in key or "ben" in key for key in keys)
    assert len([key for key in keys if key.startswith(ana) and ".holders/" not in key]) == 2
    assert files_under(data_dir / "blobs") == []  # nothing on the local disk

    download = api.get(f"/v1/memories/{image_id}/attachment", params={"user_id": "ana.lopez"})
    assert download.status_code == 200
    assert download.content == PNG
    assert download.headers["content-type"] == "image/png"

    assert api.delete("/v1/users/ana.lopez").status_code == 200
    left = all_keys(s3_endpoint_url, bucket)
    assert [key for key in left if key.startswith(ana)] == []
    assert [key for key in left if key.startswith(ben)]  # ben's copy of the same bytes stays
    ben_image = api.get("/v1/memories", params={"user_id": "ben"}).json()
    assert ben_image["total"] == 2


def test_an_unreachable_endpoint_is_a_503_and_stores_nothing(
    app_factory: AppFactory, unique: str, tmp_path: Path
) -> None:
    server = MotoServer(tmp_path / "moto")
    try:
        server.wait_ready()
        bucket = new_bucket(server.url, unique)
        api = app_factory(
            data_dir=tmp_path / "data",
            blob=blob_settings(server.url, bucket),
            store_timeout_seconds=1.0,
        )
    finally:
        server.stop()

    image = {"data_uri": data_uri(PNG), "caption": "a heron"}
    error = error_of(add(api, "cy", {"content": "birds", "attachments": [image]}), 503)
    assert error["code"] == "store_unavailable"
    assert "test-secret" not in str(error)
    assert api.get("/v1/memories", params={"user_id": "cy"}).json()["total"] == 0


def test_a_missing_bucket_stops_the_server_naming_the_setting(
    s3_endpoint_url: str, tmp_path: Path
) -> None:
    settings = make_settings(
        tmp_path / "data", blob=blob_settings(s3_endpoint_url, "no-such-bucket")
    )
    with (
        pytest.raises(ConfigurationError) as caught,
        TestClient(create_app(settings), base_url=LOCAL),
    ):
        pass
    assert "MEMMACHINE_BLOB_URL=s3://no-such-bucket/memmachine/blobs" in caught.value.message
    assert "does not exist" in caught.value.message


def test_an_endpoint_down_at_startup_stops_the_server_naming_the_blob_store(
    tmp_path: Path,
) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    settings = make_settings(
        tmp_path / "data", blob=blob_settings(endpoint, "blobs"), startup_timeout_seconds=0
    )
    with (
        pytest.raises(StoreUnavailableError) as caught,
        TestClient(create_app(settings), base_url=LOCAL),
    ):
        pass
    assert f"blob store at s3://blobs/memmachine/blobs at {endpoint}" in caught.value.message
    assert S3_KEYS["secret_access_key"] not in caught.value.message
