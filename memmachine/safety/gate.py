"""The write gate: every string a memory service stores passes :meth:`WriteGate.text`.

One function, :meth:`WriteGate.text`, takes each stored string with the name of the field it
belongs to and, by that field's entry in :data:`FIELD_POLICIES`:

1. validates it: no NUL character and no lone surrogate (UTF-8 cannot store one);
2. refuses it, or marks it, when it reads as an instruction to the model (the injection
   guard, with ``safety.block_injected_facts``);
3. redacts personal data (with ``safety.redact_pii``), counting what it replaced.

JSON values (metadata, session state, custom-type records, job payloads) are walked by
:meth:`WriteGate.json`: every key and every string value passes :meth:`WriteGate.text` under
``<field>.key`` / ``<field>.value``, and nesting deeper than ``limits.max_nesting_depth`` is
refused. Request-level size checks (message and fact counts and lengths, state bytes) are
here too, so that a service holds no validation of its own.

The services call the gate twice: on what they are given (so that embeddings are made from
redacted text) and again, inline, in every store call that writes (``store.add_episodes(
scope, gate.episodes(records))``). Both passes are the same functions, and redaction leaves
redacted text unchanged, so the second pass changes nothing unless a string escaped the
first. ``tests/unit/safety/test_write_gate_coverage.py`` walks the code of every service and
fails when a store write takes an argument that does not come straight from the gate.

Producers, invalidation reasons, metadata keys and state and record data keys are
redacted like any text. Ids and keys that address data cannot be redacted (the caller
would lose its handle), so the ids of a write's scope (:meth:`WriteGate.check_ids`, called
by the interfaces for every write) and custom-type record keys are refused, 422 naming
the field, when the redactor finds personal data in them (an e-mail address, a phone
number...). Outside the gate: the error text a worker records on a failed job (the
queue's bookkeeping) and API keys (the key store, written by the server's admin routes and
``memmachine keys``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, overload

from memmachine.config import LimitSettings, SafetySettings
from memmachine.errors import InvalidInputError, PayloadTooLargeError
from memmachine.models import EpisodeRecord, FactRecord, NewMessage, WorkingMessage
from memmachine.ports.procedures import ProcedureRecord
from memmachine.safety.pii import Redactor
from memmachine.safety.poisoning import looks_like_injection

__all__ = ["FIELD_POLICIES", "FieldPolicy", "WriteGate", "check_query"]


@dataclass(frozen=True)
class FieldPolicy:
    """What the gate does to one field's strings besides validating them."""

    #: Replace personal data (when ``safety.redact_pii`` is on).
    redact: bool = False
    #: ``"mark"``: record the reason in the owner's metadata; ``"refuse"``: raise
    #: ``InvalidInputError``; both only with ``safety.block_injected_facts``.
    injection: Literal["off", "mark", "refuse"] = "off"
    #: Shared by every user of an application (procedures): redacted with every PII kind
    #: and refused when it reads as an instruction, whatever the safety settings say.
    shared: bool = False
    #: Refuse (``InvalidInputError``) a value in which the redactor finds personal data:
    #: ids and keys that address data, which redaction would change (when
    #: ``safety.redact_pii`` is on).
    refuse_pii: bool = False


_KEEP = FieldPolicy()
_REDACT = FieldPolicy(redact=True)

#: Every field a service stores strings under. A field missing here is a ``KeyError``: a new
#: stored field needs a policy before it can be written.
FIELD_POLICIES: dict[str, FieldPolicy] = {
    # the ids of a write's scope (user, session, agent, group, org, project)
    "scope.id": FieldPolicy(refuse_pii=True),
    # messages: episodes and working memory alike
    "message.content": FieldPolicy(redact=True, injection="mark"),
    "message.producer": _REDACT,
    "message.metadata.key": _REDACT,
    "message.metadata.value": _REDACT,
    # the full-text text of an episode, made from its gated content and producer
    "episode.search_text": _KEEP,
    # profile facts
    "fact.tag": FieldPolicy(redact=True, injection="refuse"),
    "fact.feature": FieldPolicy(redact=True, injection="refuse"),
    "fact.value": FieldPolicy(redact=True, injection="refuse"),
    "fact.source": _KEEP,
    "fact.metadata.key": _REDACT,
    "fact.metadata.value": _REDACT,
    "fact.invalidation_reason": _REDACT,
    # working memory
    "working.summary": _REDACT,
    "working.state.key": _REDACT,
    "working.state.value": _REDACT,
    # custom memory types
    "record.key": FieldPolicy(refuse_pii=True),
    "record.data.key": _REDACT,
    "record.data.value": _REDACT,
    # typed agent state in a file, SQLite or Redis backend: stored exactly as saved
    "agent_state.key": _KEEP,
    "agent_state.value": _KEEP,
    # procedural memory: shared by the users of an application
    "procedure.text": FieldPolicy(shared=True, injection="refuse"),
    "procedure.source": _KEEP,
    "procedure.metadata.key": FieldPolicy(shared=True),
    "procedure.metadata.value": FieldPolicy(shared=True),
    "procedure.reason": _KEEP,
    # background jobs: ids and flags the services make
    "job.payload.key": _KEEP,
    "job.payload.value": _KEEP,
}

_SURROGATE = re.compile("[\ud800-\udfff]")

MessageT = TypeVar("MessageT", NewMessage, WorkingMessage)


class WriteGate:
    """Validation, PII redaction and the injection guard for every stored string.

    ``safety`` may be replaced at any time (the next write uses it). ``redactor`` fixes the
    redactor instead of building one from ``safety`` (custom memory types built on their own
    pass theirs).
    """

    def __init__(
        self,
        safety: SafetySettings | None = None,
        limits: LimitSettings | None = None,
        *,
        redactor: Redactor | None = None,
    ) -> None:
        self.limits = limits or LimitSettings()
        self._fixed = redactor
        #: What shared fields are redacted with: every PII kind, always.
        self._shared = redactor or Redactor()
        self.safety = safety or SafetySettings()

    @classmethod
    def plain(cls, redactor: Redactor | None = None) -> WriteGate:
        """A gate that validates, redacts only with ``redactor`` and never checks for
        injection, without reading settings from the environment."""
        safety = SafetySettings.model_construct(redact_pii=False, block_injected_facts=False)
        return cls(safety, LimitSettings.model_construct(), redactor=redactor)

    @property
    def safety(self) -> SafetySettings:
        return self._safety

    @safety.setter
    def safety(self, value: SafetySettings) -> None:
        self._safety = value
        if self._fixed is not None:
            self._redactor: Redactor | None = self._fixed
        else:
            self._redactor = Redactor(value.pii_kinds) if value.redact_pii else None

    # ------------------------------------------------------------------ the one function

    def text(
        self, field: str, path: str, value: str, found: dict[str, int], label: str = ""
    ) -> tuple[str, str | None]:
        """``value`` validated, checked and redacted by ``field``'s policy: the text to
        store and the injection reason to mark (``None`` when there is none). Counts of what
        was redacted are added to ``found``. ``path`` names the field in errors; ``label``
        words a refusal ("fact 0 value")."""
        policy = FIELD_POLICIES[field]
        if "\x00" in value:
            raise InvalidInputError(f"{path} contains a NUL character", field=path)
        if _SURROGATE.search(value) is not None:
            raise InvalidInputError(
                f"{path} contains a lone surrogate (U+D800-U+DFFF), which cannot be stored",
                field=path,
            )
        reason = None
        if policy.injection == "refuse" and (policy.shared or self._safety.block_injected_facts):
            reason = looks_like_injection(value)
            if reason is not None:
                raise InvalidInputError(
                    f"{label or path} looks like an instruction to the model ({reason}); "
                    "it is not stored as a fact",
                    field=path,
                )
        if policy.refuse_pii and self._redactor is not None:
            kinds = sorted(self._redactor.redact(value).found)
            if kinds:
                raise InvalidInputError(
                    f"{path} looks like personal data ({', '.join(kinds)}): ids and keys "
                    "may not hold it; use an opaque id",
                    field=path,
                )
        redactor = self._shared if policy.shared else self._redactor if policy.redact else None
        if redactor is not None:
            result = redactor.redact(value)
            value = result.text
            for kind, count in result.found.items():
                found[kind] = found.get(kind, 0) + count
        if policy.injection == "mark" and self._safety.block_injected_facts:
            reason = looks_like_injection(value)
        return value, reason

    def check_ids(self, ids: Mapping[str, str | None]) -> None:
        """Refuse the ids of a write's scope that hold personal data (``scope.id``)."""
        for name, value in ids.items():
            if value is not None:
                self.text("scope.id", name, value, {})

    def json(self, field: str, path: str, value: Any, found: dict[str, int], depth: int = 0) -> Any:
        """A copy of the JSON value with every key and string passed through :meth:`text`
        (``<field>.key`` / ``<field>.value``); nesting deeper than the limit is refused."""
        if isinstance(value, str):
            return self.text(f"{field}.value", path, value, found)[0]
        if isinstance(value, Mapping | list | tuple):
            if depth >= self.limits.max_nesting_depth:
                raise InvalidInputError(
                    f"{path} nests deeper than {self.limits.max_nesting_depth} levels",
                    field=path,
                )
            if isinstance(value, Mapping):
                out: dict[str, Any] = {}
                for key, item in value.items():
                    inner = f"{path}.{key}"
                    name = (
                        self.text(f"{field}.key", inner, key, found)[0]
                        if isinstance(key, str)
                        else key
                    )
                    out[name] = self.json(field, inner, item, found, depth + 1)
                return out
            return [
                self.json(field, f"{path}.{index}", item, found, depth + 1)
                for index, item in enumerate(value)
            ]
        return value

    def check_depth(self, path: str, value: Any, depth: int = 0) -> None:
        """Refuse a JSON value nested deeper than ``limits.max_nesting_depth``."""
        if isinstance(value, Mapping | list | tuple):
            if depth >= self.limits.max_nesting_depth:
                raise InvalidInputError(
                    f"{path} nests deeper than {self.limits.max_nesting_depth} levels", field=path
                )
            items = value.values() if isinstance(value, Mapping) else value
            for item in items:
                self.check_depth(path, item, depth + 1)

    # ------------------------------------------------------------------ messages

    def check_messages(self, messages: Sequence[NewMessage | WorkingMessage]) -> None:
        """How many messages, how long, not blank: ``InvalidInputError`` /
        ``PayloadTooLargeError`` naming the message."""
        limits = self.limits
        if not messages:
            raise InvalidInputError("at least one message is required", field="messages")
        if len(messages) > limits.max_batch_messages:
            raise PayloadTooLargeError(
                f"{len(messages)} messages in one request; the limit is "
                f"{limits.max_batch_messages}",
                field="messages",
            )
        for index, message in enumerate(messages):
            if len(message.content) > limits.max_message_chars:
                raise PayloadTooLargeError(
                    f"message {index} has {len(message.content)} characters; the limit is "
                    f"{limits.max_message_chars}",
                    field=f"messages.{index}.content",
                )
            if not message.content.strip():
                raise InvalidInputError(
                    f"message {index} is empty", field=f"messages.{index}.content"
                )

    @overload
    def messages(self, messages: Sequence[MessageT]) -> list[MessageT]: ...
    @overload
    def messages(self, messages: None) -> None: ...
    def messages(self, messages: Sequence[MessageT] | None) -> list[MessageT] | None:
        """Each message through :meth:`message`."""
        if messages is None:
            return None
        return [self.message(message, f"messages.{i}") for i, message in enumerate(messages)]

    def message(self, message: MessageT, path: str = "message") -> MessageT:
        """``message`` with its content and metadata redacted, ``metadata["redacted"]``
        counting what was replaced and ``metadata["suspected_injection"]`` the reason when
        the content reads as an instruction to the model (it is still stored: it is a
        record of what was said); the same object when nothing changes."""
        content, producer, metadata = self._said(
            path, message.content, message.producer, message.metadata
        )
        same = (content, producer) == (message.content, message.producer)
        if same and metadata == message.metadata:
            return message
        update = {"content": content, "producer": producer, "metadata": metadata}
        return message.model_copy(update=update)

    def episodes(self, records: Sequence[EpisodeRecord]) -> list[EpisodeRecord]:
        """Episode records as they are stored: their message fields as :meth:`message`
        treats them, their full-text text validated."""
        out = []
        for index, record in enumerate(records):
            path = f"records.{index}"
            content, producer, metadata = self._said(
                path, record.content, record.producer, record.metadata
            )
            search_text = self.text(
                "episode.search_text", f"{path}.search_text", record.search_text, {}
            )[0]
            same = (content, producer, search_text) == (
                record.content,
                record.producer,
                record.search_text,
            )
            if same and metadata == record.metadata:
                out.append(record)
                continue
            update = {
                "content": content,
                "producer": producer,
                "search_text": search_text,
                "metadata": metadata,
            }
            out.append(record.model_copy(update=update))
        return out

    def _said(
        self, path: str, content: str, producer: str | None, metadata: dict[str, Any]
    ) -> tuple[str, str | None, dict[str, Any]]:
        """A message's content, producer and metadata through the gate, with what was
        redacted and the injection found recorded in the metadata."""
        found: dict[str, int] = {}
        content, reason = self.text("message.content", f"{path}.content", content, found)
        if producer is not None:
            producer = self.text("message.producer", f"{path}.producer", producer, found)[0]
        stored = self.json("message.metadata", f"{path}.metadata", metadata, found)
        if found:
            stored["redacted"] = found
        if reason is not None:
            stored["suspected_injection"] = reason
        return content, producer, stored

    # ------------------------------------------------------------------ facts

    def check_facts(self, facts: Sequence[FactRecord]) -> None:
        """How many facts, how long, confidence in [0, 1]; then, with
        ``safety.block_injected_facts``, no fact that reads as an instruction to the model
        (``InvalidInputError`` naming ``facts.<i>.<field>``). Nothing is stored on a
        refusal."""
        limits = self.limits
        if not facts:
            raise InvalidInputError("at least one fact is required", field="facts")
        if len(facts) > limits.max_facts_per_request:
            raise PayloadTooLargeError(
                f"{len(facts)} facts in one request; the limit is {limits.max_facts_per_request}",
                field="facts",
            )
        for index, fact in enumerate(facts):
            for name in ("tag", "feature", "value"):
                text: str = getattr(fact, name)
                if not text.strip():
                    raise InvalidInputError(
                        f"fact {index} has an empty {name}", field=f"facts.{index}.{name}"
                    )
                if len(text) > limits.max_fact_chars:
                    raise PayloadTooLargeError(
                        f"fact {index} {name} is longer than {limits.max_fact_chars} characters",
                        field=f"facts.{index}.{name}",
                    )
            if not 0.0 <= fact.confidence <= 1.0:
                raise InvalidInputError(
                    "confidence must be between 0 and 1", field=f"facts.{index}.confidence"
                )
        if self._safety.block_injected_facts:
            for index, fact in enumerate(facts):
                for name in ("value", "feature", "tag"):
                    reason = looks_like_injection(getattr(fact, name))
                    if reason is not None:
                        raise InvalidInputError(
                            f"fact {index} {name} looks like an instruction to the model "
                            f"({reason}); it is not stored as a fact",
                            field=f"facts.{index}.{name}",
                        )

    def facts(self, facts: Sequence[FactRecord]) -> list[FactRecord]:
        """Copies of the facts with tag, feature, value and metadata values redacted
        (``metadata["redacted"]`` counting what was replaced), each refused when it reads as
        an instruction to the model."""
        out = []
        for index, fact in enumerate(facts):
            path = f"facts.{index}"
            found: dict[str, int] = {}
            texts = {
                name: self.text(
                    f"fact.{name}",
                    f"{path}.{name}",
                    getattr(fact, name),
                    found,
                    f"fact {index} {name}",
                )[0]
                for name in ("value", "feature", "tag")
            }
            source = self.text("fact.source", f"{path}.source", fact.source, found)[0]
            metadata = self.json("fact.metadata", f"{path}.metadata", fact.metadata, found)
            if found:
                metadata["redacted"] = found
            out.append(fact.model_copy(update={**texts, "source": source, "metadata": metadata}))
        return out

    def reason(self, reason: str) -> str:
        """Why a fact was invalidated, as it is stored."""
        return self.text("fact.invalidation_reason", "reason", reason, {})[0]

    # ------------------------------------------------------------------ working memory

    def check_working(
        self,
        messages: Sequence[WorkingMessage] | None,
        state: dict[str, Any] | None,
        summary: str | None,
        expected_version: int | None,
    ) -> None:
        """The limits of a working-memory write: messages as :meth:`check_messages`, the
        state's nesting and JSON size, the summary's length, a non-negative version."""
        if messages is not None:
            self.check_messages(messages)
        if state is not None:
            self.check_depth("state", state)
            if len(json.dumps(state)) > self.limits.max_state_bytes:
                raise PayloadTooLargeError(
                    f"state is larger than {self.limits.max_state_bytes} bytes", field="state"
                )
        if summary is not None and len(summary) > self.limits.max_message_chars:
            raise PayloadTooLargeError(
                f"summary is longer than {self.limits.max_message_chars} characters",
                field="summary",
            )
        if expected_version is not None and expected_version < 0:
            raise InvalidInputError("expected_version must be >= 0", field="expected_version")

    @overload
    def state(self, state: dict[str, Any]) -> dict[str, Any]: ...
    @overload
    def state(self, state: None) -> None: ...
    def state(self, state: dict[str, Any] | None) -> dict[str, Any] | None:
        """A session state as it is stored: string values redacted, keys validated."""
        if state is None:
            return None
        stored: dict[str, Any] = self.json("working.state", "state", state, {})
        return stored

    @overload
    def summary(self, summary: str) -> str: ...
    @overload
    def summary(self, summary: None) -> None: ...
    def summary(self, summary: str | None) -> str | None:
        """A session summary as it is stored (redacted)."""
        if summary is None:
            return None
        return self.text("working.summary", "summary", summary, {})[0]

    def redactions(self, value: Any) -> tuple[Any, dict[str, int]]:
        """What redaction would make of a JSON value, and what it would replace (nothing
        when redaction is off); the value itself is not validated."""
        if self._redactor is None:
            return value, {}
        result = self._redactor.redact_json(value)
        return result.value, result.found

    # ------------------------------------------------------------------ procedures

    def procedure(self, record: ProcedureRecord, identities: Sequence[str] = ()) -> ProcedureRecord:
        """A procedure as it is stored, shared by every user of an application: limits
        checked (a goal and at least one step, lengths and counts), every PII kind
        redacted, each of ``identities`` (the user's id and names the session showed)
        replaced by ``[USER]`` wherever it still appears (``metadata["redacted"]`` counting what was
        replaced) and the whole refused when any part reads as an instruction to the model,
        whatever the safety settings say (``InvalidInputError`` naming the field)."""
        limits = self.limits
        if not record.goal.strip():
            raise InvalidInputError("goal must not be empty", field="goal")
        if not any(step.strip() for step in record.steps):
            raise InvalidInputError("at least one step is required", field="steps")
        if not 0.0 <= record.confidence <= 1.0:
            raise InvalidInputError("confidence must be between 0 and 1", field="confidence")
        found: dict[str, int] = {}
        names = sorted({n.strip() for n in identities if len(n.strip()) >= 3}, key=len)[::-1]

        def clean(path: str, value: str) -> str:
            if len(value) > limits.max_fact_chars:
                raise PayloadTooLargeError(
                    f"{path} is longer than {limits.max_fact_chars} characters", field=path
                )
            value = self.text("procedure.text", path, value, found)[0]
            for name in names:  # after redaction, so that an email keeps its token
                value, count = re.subn(re.escape(name), "[USER]", value, flags=re.IGNORECASE)
                if count:
                    found["identity"] = found.get("identity", 0) + count
            return value

        lists: dict[str, list[str]] = {}
        for name in ("steps", "preconditions", "pitfalls"):
            items = [item for item in getattr(record, name) if item.strip()]
            if len(items) > limits.max_facts_per_request:
                raise PayloadTooLargeError(
                    f"{len(items)} {name}; the limit is {limits.max_facts_per_request}",
                    field=name,
                )
            lists[name] = [clean(f"{name}.{i}", item) for i, item in enumerate(items)]
        goal = clean("goal", record.goal)
        source = self.text("procedure.source", "source", record.source, found)[0]
        metadata = self.json("procedure.metadata", "metadata", record.metadata, found)
        if found:
            metadata["redacted"] = found
        update = {"goal": goal, "source": source, "metadata": metadata, **lists}
        return record.model_copy(update=update)

    def procedure_reason(self, reason: str) -> str:
        """Why a procedure version was superseded, as it is stored."""
        return self.text("procedure.reason", "reason", reason, {})[0]

    # ------------------------------------------------------------------ records and jobs

    def record_data(self, data: dict[str, Any]) -> dict[str, Any]:
        """A custom-type record's JSON object, as it is stored."""
        stored: dict[str, Any] = self.json("record.data", "input", data, {})
        return stored

    def record_envelope(self, schema: str, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The envelope that keeps a custom type's records of one scope (each record's key,
        data and times passed through the gate; an expiry, a timestamp, kept as it is)."""
        stored = []
        for index, record in enumerate(records):
            path = f"records.{index}"
            item = {
                "key": self.text("record.key", f"{path}.key", record["key"], {})[0],
                "data": self.json("record.data", f"{path}.data", record["data"], {}),
                "created_at": record["created_at"],
                "updated_at": record["updated_at"],
            }
            if record.get("expires_at") is not None:
                item["expires_at"] = record["expires_at"]
            stored.append(item)
        return {"schema": schema, "version": 1, "data": {"records": stored}}

    def envelope(self, field: str, envelope: dict[str, Any]) -> dict[str, Any]:
        """A state envelope (``{"schema", "version", "data"}``) as it is stored under
        ``field``'s policy."""
        stored: dict[str, Any] = self.json(field, "state", envelope, {})
        return stored

    def job_payload(self, payload: dict[str, Any]) -> dict[str, Any]:
        """A background job's payload, as it is queued."""
        stored: dict[str, Any] = self.json("job.payload", "payload", payload, {})
        return stored


def check_query(limits: LimitSettings, query: str, top_k: int) -> None:
    """A search's query and ``top_k`` within the limits (``InvalidInputError`` /
    ``PayloadTooLargeError`` naming the field)."""
    if not query.strip():
        raise InvalidInputError("query must not be empty", field="query")
    if len(query) > limits.max_message_chars:
        raise PayloadTooLargeError("query is too long", field="query")
    if not 1 <= top_k <= limits.max_top_k:
        raise InvalidInputError(f"top_k must be between 1 and {limits.max_top_k}", field="top_k")
