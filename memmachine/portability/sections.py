"""The sections version 3 added: typed agent state, custom-type records, attachment blobs and
(when asked for) the application's procedures; how they are written, checked and restored.

* ``agent_state``: the records of the state backend the caller names (files, SQLite,
  Redis), but for custom-type records kept there. States kept in working memory travel
  with ``working`` and are not repeated.
* ``custom_records``: one element per (custom type, scope) with the type's records, from the
  manager's memory-type backend. Importing needs every type registered on the target.
* ``attachments``: one element per blob with its bytes in base64 (so one element is at most
  about 4/3 of the attachment size limit), its SHA-256 and the ids of the episodes holding
  it; the episodes keep their ``metadata["attachment"]`` link, so the import gives each
  holder its blob back. The bytes must hash to ``sha256``.
* ``procedures``: an application's, not a user's: only an export that asks for them
  (``procedures=True``, ``memmachine export --procedures``) carries the project's
  procedures (every agent's), with their use counts and superseded versions; ``None``
  otherwise. An import restores a procedure whose goal the target's agent does not have
  yet, version by version through the gate, and leaves an existing goal alone; ids and
  times are the target's.

Each restore leaves alone what is already there, so importing twice changes nothing.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from memmachine.errors import InvalidInputError, NotFoundError
from memmachine.memory.custom import PARTITION_FIELDS, RECORD_PREFIX
from memmachine.models import Scope
from memmachine.portability.document import (
    PAGE,
    DocumentError,
    ExportDocument,
    ExportedAttachment,
    ExportedCustomRecord,
    ExportedCustomSpace,
    ExportedProcedure,
    ExportedProcedureVersion,
    ExportedState,
)
from memmachine.ports import ATTACHMENT_KEY, StateBackend
from memmachine.ports.procedures import AppScope, ProcedureRecord

if TYPE_CHECKING:
    from pydantic import BaseModel

    from memmachine.manager import MemoryManager
    from memmachine.models import Episode

__all__ = [
    "Counts",
    "attachment_holder",
    "check_sections",
    "import_sections",
    "write_sections",
]

Write = Callable[[str], object]
#: How many elements each section wrote or restored, by section name.
Counts = dict[str, int]


def attachment_holder(episode: Episode, blobs: dict[str, list[str]]) -> None:
    """Note the blob ``episode`` holds (if any) under its SHA-256."""
    link = episode.metadata.get(ATTACHMENT_KEY)
    if isinstance(link, dict) and isinstance(link.get("sha256"), str):
        blobs.setdefault(link["sha256"], []).append(episode.id)


def _ids(scope: Scope) -> dict[str, str | None]:
    return {"agent_id": scope.agent_id, "session_id": scope.session_id, "group_id": scope.group_id}


def _narrowed(user: Scope, item: ExportedState | ExportedCustomSpace) -> Scope:
    return user.model_copy(
        update={"agent_id": item.agent_id, "session_id": item.session_id, "group_id": item.group_id}
    )


def _array(write: Write, name: str, items: list[BaseModel]) -> int:
    write(f',\n"{name}": [')
    for index, item in enumerate(items):
        write(("\n" if index == 0 else ",\n") + item.model_dump_json())
    write("\n]")
    return len(items)


async def write_sections(
    manager: MemoryManager,
    user: Scope,
    write: Write,
    blobs: dict[str, list[str]],
    *,
    state: StateBackend | None,
    procedures: bool,
) -> Counts:
    """Write the version 3 sections (each as ``,\\n"name": [...]``), one element at a
    time; the caller closes the document."""
    counts: Counts = {}
    states: list[BaseModel] = []
    if state is not None and state.kind != "working-memory":
        # (custom-type records kept in the same backend go in their own section)
        states = [
            ExportedState(**_ids(record.scope), name=record.name, envelope=record.envelope)
            for record in await state.list_user(user)
            if not record.name.startswith(f"{RECORD_PREFIX}.")
        ]
    counts["agent_state"] = _array(write, "agent_state", states)

    spaces: list[BaseModel] = [
        ExportedCustomSpace(
            type=record.name.removeprefix(f"{RECORD_PREFIX}."),
            **_ids(record.scope),
            records=[
                ExportedCustomRecord.model_validate(item)
                for item in record.envelope.get("data", {}).get("records", [])
            ],
        )
        for record in await manager.memory_types.list_user(user)
    ]
    counts["custom_records"] = _array(write, "custom_records", spaces)

    write(',\n"attachments": [')
    counts["attachments"] = 0
    store = manager.episodic_service.blobs
    for sha256, holders in blobs.items():
        if store is None:
            break
        try:
            data = b"".join([chunk async for chunk in store.read(user, sha256)])
        except NotFoundError:
            continue  # released meanwhile: its episodes keep their link, without bytes
        item = ExportedAttachment(
            sha256=sha256,
            size=len(data),
            holders=holders,
            data=base64.b64encode(data).decode("ascii"),
        )
        write(("\n" if counts["attachments"] == 0 else ",\n") + item.model_dump_json())
        counts["attachments"] += 1
    write("\n]")

    if procedures:
        counts["procedures"] = await _write_procedures(manager, user, write)
    return counts


async def _write_procedures(manager: MemoryManager, user: Scope, write: Write) -> int:
    service = manager.procedural_service
    app = AppScope.of(user.user_scope())
    write(',\n"procedures": [')
    count = 0
    if service.store_or_none is not None:
        offset = 0
        while True:
            page = await service.list_procedures(app, limit=PAGE, offset=offset)
            for procedure in page:
                _, history = await service.history(app, procedure.id)
                item = ExportedProcedure(
                    **procedure.model_dump(
                        exclude={"tenant", "org_id", "project_id", "version", "embedding"}
                    ),
                    history=[
                        ExportedProcedureVersion(
                            **version.model_dump(exclude={"procedure_id"}),
                        )
                        for version in history
                    ],
                )
                write(("\n" if count == 0 else ",\n") + item.model_dump_json())
                count += 1
            offset += len(page)
            if len(page) < PAGE:
                break
    write("\n]")
    return count


# --------------------------------------------------------------------------- import


def check_sections(
    manager: MemoryManager, document: ExportDocument, state: StateBackend | None
) -> list[bytes]:
    """What the target cannot take, found before the first write; returns the decoded
    bytes of each attachment."""
    if document.agent_state and state is None:
        raise DocumentError(
            "$.agent_state", "the document holds typed agent state: name a state backend"
        )
    for index, item in enumerate(document.agent_state):
        check = partial(manager.gate.envelope, "agent_state", item.envelope)
        _gated(f"$.agent_state[{index}].envelope", check)
    for index, space in enumerate(document.custom_records):
        _check_space(manager, f"$.custom_records[{index}]", space)
    if document.procedures and manager.procedural_service.store_or_none is None:
        raise DocumentError("$.procedures", "procedural memory is off here")
    episodes = {episode.id for episode in document.episodes}
    decoded: list[bytes] = []
    for index, attachment in enumerate(document.attachments):
        path = f"$.attachments[{index}]"
        if manager.episodic_service.blobs is None:
            raise DocumentError(path, "this memmachine keeps no attachments")
        try:
            data = base64.b64decode(attachment.data, validate=True)
        except (binascii.Error, ValueError):
            raise DocumentError(f"{path}.data", "not valid base64") from None
        if len(data) != attachment.size or hashlib.sha256(data).hexdigest() != attachment.sha256:
            raise DocumentError(f"{path}.data", "the bytes do not match sha256 and size")
        for number, holder in enumerate(attachment.holders):
            if holder not in episodes:
                raise DocumentError(
                    f"{path}.holders[{number}]", f"episode {holder!r} is not in the document"
                )
        decoded.append(data)
    return decoded


def _gated(path: str, check: Callable[[], object]) -> None:
    """Run a write gate check; what it refuses is a :class:`DocumentError` under ``path``."""
    try:
        check()
    except InvalidInputError as exc:
        where = f"{path}.{exc.field}" if exc.field else path
        raise DocumentError(where, exc.message) from None


def _check_space(manager: MemoryManager, path: str, space: ExportedCustomSpace) -> None:
    """A custom type's records fit the target's registration: the type is registered, the
    scope ids are its partition's, and the records pass the gate within its bounds."""
    types = manager.memory_types
    if space.type not in types:
        raise DocumentError(f"{path}.type", f"memory type {space.type!r} is not registered here")
    kind = types.get(space.type)
    partition = tuple(kind.partition_by)
    for field in PARTITION_FIELDS:
        if (getattr(space, field) is not None) != (field in partition):
            per = ", ".join(partition) or "user"
            raise DocumentError(
                f"{path}.{field}", f"memory type {space.type!r} keeps its records per {per}"
            )
    if len(space.records) > kind.max_records:
        raise DocumentError(
            f"{path}.records",
            f"{len(space.records)} records; {space.type!r} holds at most {kind.max_records}",
        )
    name = f"{RECORD_PREFIX}.{space.type}"
    records = [record.model_dump(mode="json") for record in space.records]
    _gated(path, lambda: types.gate.record_envelope(name, records))
    envelope = {"schema": name, "version": 1, "data": {"records": records}}
    size = len(json.dumps(envelope, separators=(",", ":")).encode())
    if size > kind.max_bytes:
        raise DocumentError(
            f"{path}.records", f"{size} bytes; {space.type!r} holds at most {kind.max_bytes}"
        )


async def import_sections(
    manager: MemoryManager,
    document: ExportDocument,
    user: Scope,
    state: StateBackend | None,
    decoded: list[bytes],
) -> Counts:
    """Restore the version 3 sections (after the episodes, which hold the attachments)."""
    counts: Counts = {"agent_state": 0, "custom_records": 0, "attachments": 0, "procedures": 0}
    for item in document.agent_state:
        assert state is not None  # check_sections refused a document without one
        scope = _narrowed(user, item)
        held = await state.get(scope, item.name)
        if held is None or held.envelope != item.envelope:
            await state.put(scope, item.name, manager.gate.envelope("agent_state", item.envelope))
            counts["agent_state"] += 1
    for space in document.custom_records:
        scope = _narrowed(user, space)
        records = [record.model_dump(mode="json") for record in space.records]
        if await manager.memory_types.restore(space.type, scope, records):
            counts["custom_records"] += 1
    blobs = manager.episodic_service.blobs
    for attachment, data in zip(document.attachments, decoded, strict=True):
        assert blobs is not None  # check_sections refused attachments without a blob store
        for holder in attachment.holders:
            await blobs.put(user, data, holder=holder)
        counts["attachments"] += 1
    for procedure in document.procedures or []:
        if await _restore_procedure(manager, user, procedure):
            counts["procedures"] += 1
    return counts


async def _restore_procedure(
    manager: MemoryManager, user: Scope, procedure: ExportedProcedure
) -> bool:
    service = manager.procedural_service
    app = AppScope.of(user.user_scope()).model_copy(update={"agent_id": procedure.agent_id})
    store = service.store_or_none
    assert store is not None  # check_sections refused procedures without a store
    if await store.by_goal(app, procedure.goal) is not None:
        return False
    replaces: str | None = None
    reason = "superseded"
    versions: list[Any] = [*procedure.history, procedure]
    for version in versions:
        record = ProcedureRecord(
            goal=version.goal,
            steps=version.steps,
            preconditions=version.preconditions,
            pitfalls=version.pitfalls,
            confidence=version.confidence,
            source=version.source,
            sources=version.sources,
            metadata=procedure.metadata if version is procedure else {},
        )
        saved = await service.restore(
            app,
            record,
            replaces=replaces,
            reason=reason,
            successes=version.successes,
            failures=version.failures,
        )
        replaces = saved.id
        reason = getattr(version, "reason", "superseded")
    return True
