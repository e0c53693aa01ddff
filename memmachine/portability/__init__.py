"""One user's memories as a versioned JSON document: export and import.

The document (``format`` ``"memmachine-export"``, ``version`` 1)::

    {"format": "memmachine-export", "version": 1, "exported_at": "...",
     "scope": {"tenant", "org_id", "project_id", "user_id"},
     "episodes": [{"id", "session_id", "agent_id", "group_id", "sequence", "role",
                   "producer", "content", "timestamp", "metadata"}, ...],
     "facts": [{"id", "tag", "feature", "value", "confidence", "source",
                "source_session_id", "source_episode_ids", "metadata", "agent_id",
                "group_id", "created_at", "updated_at", "valid_from",
                "history": [{"value", ..., "valid_from", "valid_to", "reason"}]}, ...],
     "working": [{"session_id", "messages", "state", "summary"}, ...]}

:func:`export_user` writes it piece by piece while paging through the stores, so a large
user never sits in memory whole. Episodes are oldest first; facts are ordered by (tag,
feature) with their closed versions oldest first; working memory is exported for every
session that has episodes (the working store cannot list sessions on its own).

:func:`parse_document` validates a whole document before anything is written and raises
:class:`DocumentError` naming the JSON path (``$.episodes[3].role``) of the first problem.
:func:`import_document` then checks it against the manager's limits and safety settings
(again before writing) and writes through the :class:`~memmachine.manager.MemoryManager`, so
PII redaction and the injection guard apply. Importing the same document twice stores
nothing twice: episodes keep their ids and an id the user already has is skipped; a fact
whose (tag, feature) already holds the same value is left alone; working memory is replaced.
Fact ids and the store's own times (``created_at``, ``updated_at``, ``valid_from``, the
history's ``valid_to``) are re-stamped on import; the history's values, provenance and
reasons are replayed in order for a (tag, feature) the target has never held.
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
