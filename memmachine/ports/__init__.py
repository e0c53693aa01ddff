"""Ports: the storage and model roles the memory services depend on, with their contracts.

Every adapter of a port passes the shared contract suite in ``tests/contract/``. The contracts
in each port's docstring are what that suite checks; an adapter that needs to deviate must
change the contract first. Stores live in :mod:`~memmachine.ports.stores`, the job queue in
:mod:`~memmachine.ports.jobs`, record state in :mod:`~memmachine.ports.state` and models
(embedders, rerankers, language models) in :mod:`~memmachine.ports.inference`, attachments
(blobs, the model that describes them, the URL fetcher) in :mod:`~memmachine.ports.blobs`.

Common rules for every store:

* Lifecycle: ``start()`` connects and creates what the store needs (idempotently); ``close()``
  releases everything and may be called twice. Stores are async context managers through
  :class:`Lifecycle`.
* Scope: every method takes a :class:`~memmachine.models.Scope`. ``tenant``, ``org_id``,
  ``project_id`` and ``user_id`` always match exactly; ``agent_id``, ``session_id`` and
  ``group_id`` narrow the match when set. Nothing outside the scope is ever read, changed or
  counted.
* Errors: driver exceptions never escape; a failing backend raises
  :class:`~memmachine.errors.StoreError` (or ``StoreUnavailableError``) naming the store.
* ``health()`` never raises: it reports ``status="down"`` with a detail instead.
* Listing users: ``list_users(project, *, prefix=None, after=None, limit=100)`` (episode,
  profile and working stores) returns the users of one :class:`~memmachine.models.ProjectScope`
  the store holds something for, as :class:`~memmachine.models.UserActivity`, ordered by
  ``user_id`` in code-point order, only ids above ``after`` and starting with ``prefix``
  (when given), at most ``limit`` (``limit`` < 1 returns ``[]``). Each store returns the
  same order, so a caller can page through the union of several stores with ``after``.
  Nothing of another tenant, org or project is read or counted.
* Listing projects: ``list_projects(*, after=None, limit=100)`` (episode, profile and
  working stores) returns the :class:`~memmachine.models.ProjectScope` of every project
  of every tenant for which ``list_users`` would list at least one user, ordered by
  ``(tenant, org_id, project_id)`` in code-point order, only those above ``after`` (a
  project; ``None``: from the first), at most ``limit`` (``limit`` < 1 returns ``[]``).
  It is the one store read that spans tenants: the retention sweep's, so that every
  project holding data is swept. It returns ids only, never what is stored.
"""

from __future__ import annotations

from memmachine.ports.blobs import (
    ATTACHMENT_KEY,
    AttachmentFetcher,
    BlobInfo,
    BlobStore,
    MediaDescriber,
)
from memmachine.ports.clock import Clock, SystemClock
from memmachine.ports.idempotency import IdempotencyRecord, IdempotencyStore
from memmachine.ports.inference import (
    ChatMessage,
    Embedder,
    LanguageModel,
    QueryEmbedder,
    Reranker,
    ResultT,
    SpanEmbedder,
    SpanSet,
    TokenCounter,
    embed_queries,
)
from memmachine.ports.jobs import Job, JobQueue, JobQueueStats, JobStatus
from memmachine.ports.retention import RetentionPolicyStore
from memmachine.ports.state import (
    STATE_NAME_PATTERN,
    StateBackend,
    StateRecord,
    StoredState,
    check_expected_revision,
    record_key,
    scope_fields,
    scope_of_key,
    session_of,
    sorted_records,
    stale_revision,
    stored_record,
)
from memmachine.ports.stores import (
    EpisodeStore,
    KeyStore,
    Lifecycle,
    ProfileStore,
    RateLimiter,
    WorkingMemoryStore,
    page_of_projects,
)

__all__ = [
    "ATTACHMENT_KEY",
    "STATE_NAME_PATTERN",
    "AttachmentFetcher",
    "BlobInfo",
    "BlobStore",
    "ChatMessage",
    "Clock",
    "Embedder",
    "EpisodeStore",
    "IdempotencyRecord",
    "IdempotencyStore",
    "Job",
    "JobQueue",
    "JobQueueStats",
    "JobStatus",
    "KeyStore",
    "LanguageModel",
    "Lifecycle",
    "MediaDescriber",
    "ProfileStore",
    "QueryEmbedder",
    "RateLimiter",
    "Reranker",
    "ResultT",
    "RetentionPolicyStore",
    "SpanEmbedder",
    "SpanSet",
    "StateBackend",
    "StateRecord",
    "StoredState",
    "SystemClock",
    "TokenCounter",
    "WorkingMemoryStore",
    "check_expected_revision",
    "embed_queries",
    "page_of_projects",
    "record_key",
    "scope_fields",
    "scope_of_key",
    "session_of",
    "sorted_records",
    "stale_revision",
    "stored_record",
]
