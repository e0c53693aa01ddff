"""One user's memories as a versioned JSON document: export and import.

The document (``format`` ``"memmachine-export"``, ``version`` 3; versions 1 and 2 still
import)::

    {"format": "memmachine-export", "version": 3, "exported_at": "...",
     "scope": {"tenant", "org_id", "project_id", "user_id"},
     "episodes": [{"id", "session_id", "agent_id", "group_id", "sequence", "role",
                   "producer", "content", "timestamp", "metadata"}, ...],
     "facts": [{"id", "tag", "feature", "value", "confidence", "source",
                "source_session_id", "source_episode_ids", "metadata", "agent_id",
                "group_id", "created_at", "updated_at", "valid_from",
                "history": [{"value", ..., "valid_from", "valid_to", "reason",
                             "fact_id", "recorded_at"}]}, ...],
     "closed_facts": [{"tag", "feature", "history": [...]}, ...],
     "working": [{"session_id", "messages", "state", "summary"}, ...],
     "agent_state": [{"agent_id", "session_id", "group_id", "name", "envelope"}, ...],
     "custom_records": [{"type", "agent_id", "session_id", "group_id",
                         "records": [{"key", "data", "created_at", "updated_at"}]}, ...],
     "attachments": [{"sha256", "size", "holders": [episode ids], "data": base64}, ...],
     "procedures": [{"id", "agent_id", "goal", "steps", ..., "successes", "failures",
                     "history": [...]}, ...] | null}

``closed_facts`` holds the (tag, feature)s with no current value, only closed versions (an
invalidated fact). ``working`` holds every live session of the user, with or without
episodes.

:func:`export_user` writes it piece by piece while paging through the stores, so a large
user never sits in memory whole. Episodes are oldest first; facts are ordered by (tag,
feature) with their closed versions oldest first.

:func:`parse_document` validates a whole document before anything is written and raises
:class:`DocumentError` naming the JSON path (``$.episodes[3].role``) of the first problem.
:func:`import_document` then checks it against the manager's limits and safety settings
(again before writing) and writes through the :class:`~memmachine.manager.MemoryManager`, so
PII redaction and the injection guard apply. Importing the same document twice stores
nothing twice: episodes keep their ids and an id the user already has is skipped; a fact
whose (tag, feature) already holds the same value is left alone; working memory is replaced.
A (tag, feature) new to the target has its history replayed in order (values, provenance,
reasons) and then gets the exporting store's fact id (unless another fact holds it) and
times back (``ProfileStore.restore_fact_times``), so an export -> forget -> import round trip
gives identical stores; an episode's storage time is the target store's.

The sections of version 3 (typed agent state of the state backend the caller names,
custom-type records, attachment blobs, and the application's procedures only when asked
for) are described in :mod:`memmachine.portability.sections`. New sections plug in as
described on :class:`ExportDocument`.
"""

from __future__ import annotations

from memmachine.portability.document import (
    FORMAT_NAME,
    FORMAT_VERSION,
    DocumentError,
    ExportDocument,
    ExportedEpisode,
    ExportedFact,
    ExportedFactVersion,
    ExportedMessage,
    ExportedSession,
    ExportScope,
    Progress,
    parse_document,
)
from memmachine.portability.export import ExportReport, export_user
from memmachine.portability.importing import ImportReport, import_document

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "DocumentError",
    "ExportDocument",
    "ExportReport",
    "ExportScope",
    "ExportedEpisode",
    "ExportedFact",
    "ExportedFactVersion",
    "ExportedMessage",
    "ExportedSession",
    "ImportReport",
    "Progress",
    "export_user",
    "import_document",
    "parse_document",
]
