"""Looking into the S3-compatible endpoint the tests start (``s3_endpoint_url``): a client,
a bucket per test and every key in a bucket, straight through boto3."""

from __future__ import annotations

import functools
from typing import Any

import boto3

__all__ = ["REGION", "S3_KEYS", "all_keys", "new_bucket", "s3_client"]

REGION = "us-east-1"
#: moto takes any key.
S3_KEYS = {"access_key_id": "test-key", "secret_access_key": "test-secret"}


@functools.cache
def s3_client(endpoint: str) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=S3_KEYS["access_key_id"],
        aws_secret_access_key=S3_KEYS["secret_access_key"],
    )


def new_bucket(endpoint: str, token: str) -> str:
    """A new, empty bucket named for ``token`` (a test's ``unique``)."""
    name = f"blobs-{token}".lower()[:63]
    s3_client(endpoint).create_bucket(Bucket=name)
    return name


def all_keys(endpoint: str, bucket: str) -> list[str]:
    pages = s3_client(endpoint).get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return [entry["Key"] for page in pages for entry in page.get("Contents", [])]
