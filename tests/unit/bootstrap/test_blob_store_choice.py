"""Which blob store the settings choose: files in the data dir by default, an S3-compatible
bucket with ``MEMMACHINE_BLOB_URL``, and a wrong URL or half a key pair refused naming the
variables."""

from __future__ import annotations

from pathlib import Path

import pytest

from memmachine.adapters.file.file_blob_store import FileBlobStore
from memmachine.adapters.s3.s3_blob_store import S3BlobStore
from memmachine.bootstrap import build_blob_store
from memmachine.config import Settings
from memmachine.errors import ConfigurationError


def test_blobs_are_files_in_the_data_dir_by_default(tmp_path: Path) -> None:
    store = build_blob_store(Settings(data_dir=tmp_path))
    assert isinstance(store, FileBlobStore)
    assert store.root == (tmp_path / "blobs").resolve()


def test_the_s3_variables_choose_a_bucket_and_prefix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMMACHINE_BLOB_URL", "s3://team-blobs/prod/memmachine/")
    monkeypatch.setenv("MEMMACHINE_BLOB_ENDPOINT_URL", "http://minio:9000")
    monkeypatch.setenv("MEMMACHINE_BLOB_PATH_STYLE", "true")
    monkeypatch.setenv("MEMMACHINE_BLOB_ACCESS_KEY_ID", "AKIAEXAMPLE")
    monkeypatch.setenv("MEMMACHINE_BLOB_SECRET_ACCESS_KEY", "very-secret")
    settings = Settings(data_dir=tmp_path)
    store = build_blob_store(settings)
    assert isinstance(store, S3BlobStore)
    assert (store.bucket, store.prefix) == ("team-blobs", "prod/memmachine/")
    assert store.endpoint_url == "http://minio:9000"
    assert "very-secret" in settings.secrets()  # scrubbed from startup messages
    assert "very-secret" not in store.setting


@pytest.mark.parametrize(
    "url", ["file:///tmp/blobs", "s3://", "s3://key:secret@bucket/x", "gs://bucket", "bucket"]
)
def test_a_blob_url_that_is_no_bucket_is_refused_naming_the_variable(
    tmp_path: Path, url: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        build_blob_store(Settings(data_dir=tmp_path, blob={"url": url}))
    assert caught.value.message.startswith("MEMMACHINE_BLOB_URL: ")
    assert "secret" not in caught.value.message.replace("_SECRET_", "")


def test_half_a_key_pair_is_refused(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, blob={"url": "s3://b", "access_key_id": "AKIA"})
    with pytest.raises(ConfigurationError) as caught:
        build_blob_store(settings)
    assert "MEMMACHINE_BLOB_SECRET_ACCESS_KEY" in caught.value.message


def test_the_compose_files_empty_blob_variables_keep_blobs_in_the_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docker/compose.yaml passes every ``MEMMACHINE_BLOB_*`` variable, empty when unset."""
    for name in ("URL", "ENDPOINT_URL", "REGION", "ACCESS_KEY_ID", "SECRET_ACCESS_KEY"):
        monkeypatch.setenv(f"MEMMACHINE_BLOB_{name}", "")
    monkeypatch.setenv("MEMMACHINE_BLOB_PATH_STYLE", "false")
    assert isinstance(build_blob_store(Settings(data_dir=tmp_path)), FileBlobStore)
