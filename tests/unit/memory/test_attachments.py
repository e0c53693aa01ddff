"""The attachment service on a real file blob store: what it keeps when the episode write
fails, and how it reads what callers send (data URIs, types from names)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memmachine.adapters.file.file_blob_store import FileBlobStore
from memmachine.config import AttachmentSettings, LimitSettings, SafetySettings
from memmachine.errors import StoreError, UnsupportedMediaTypeError
from memmachine.memory.attachments import AttachedMessage, AttachmentInput, AttachmentService
from memmachine.models import Episode, NewMessage, Scope
from memmachine.safety.gate import WriteGate

SCOPE = Scope(user_id="ana", session_id="s1")


def service(root: Path) -> AttachmentService:
    return AttachmentService(
        blobs=FileBlobStore(root),
        gate=WriteGate(SafetySettings(), LimitSettings()),
        settings=AttachmentSettings(),
    )


async def test_blobs_kept_for_a_write_that_fails_are_released(tmp_path: Path) -> None:
    attachments = service(tmp_path / "blobs")
    given = [
        AttachmentInput(data=b"\x89PNG one", mime="image/png", caption="first"),
        AttachmentInput(data=b"\x89PNG two", mime="image/png", caption="second"),
    ]

    async def failing_store(messages: list[NewMessage], ids: list[str]) -> list[Episode]:
        assert len(messages) == len(ids) == 3
        assert await attachments.blobs.count(SCOPE) == 2  # kept before the write
        raise StoreError("episode store down", store="episodes")

    with pytest.raises(StoreError):
        await attachments.add(
            SCOPE, [AttachedMessage(NewMessage(content="two pictures"), given)], failing_store
        )
    assert [p for p in (tmp_path / "blobs").rglob("*") if p.is_file()] == []


async def test_what_is_planned_for_the_store(tmp_path: Path) -> None:
    attachments = service(tmp_path / "blobs")
    planned: list[NewMessage] = []

    async def store(messages: list[NewMessage], ids: list[str]) -> list[Episode]:
        planned.extend(messages)
        return []

    note = AttachmentInput(data_uri="data:,milk%20and%20eggs", name="list.txt")
    await attachments.add(
        SCOPE,
        [AttachedMessage(NewMessage(content="shopping", metadata={"channel": "sms"}), [note])],
        store,
    )
    text, described = planned
    assert text.content == "shopping"
    assert described.content == "milk and eggs"  # percent-encoded, type from the name
    link = described.metadata["attachment"]
    assert (link["mime"], link["size"], link["described_by"]) == ("text/plain", 13, "text")
    assert described.metadata["channel"] == "sms"  # the message's own metadata is kept


async def test_a_type_that_cannot_be_told_is_refused(tmp_path: Path) -> None:
    attachments = service(tmp_path / "blobs")

    async def store(messages: list[NewMessage], ids: list[str]) -> list[Episode]:
        raise AssertionError("nothing may be stored")

    with pytest.raises(UnsupportedMediaTypeError) as refused:
        await attachments.add(
            SCOPE,
            [AttachedMessage(NewMessage(content="x"), [AttachmentInput(data=b"?", caption="c")])],
            store,
        )
    assert refused.value.field == "messages.0.attachments.0.mime"
