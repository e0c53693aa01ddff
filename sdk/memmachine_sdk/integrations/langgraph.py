"""LangGraph long-term memory on memmachine: :class:`MemMachineStore`, a LangGraph
``BaseStore`` whose items are the profile facts of memmachine users.

Install with ``pip install 'memmachine-sdk[langgraph]'``. The store talks to a memmachine
server through the SDK: pass a :class:`~memmachine_sdk.Client` for graphs run with
``invoke`` / ``stream``, an :class:`~memmachine_sdk.AsyncClient` for ``ainvoke`` /
``astream``, or both. The clients' org, project and API key (its tenant) scope every call.

How namespaces map onto memmachine's scopes::

    namespace (user_id, label_1, ..., label_n)   n >= 1
        user_id           -> the memmachine user (ids as the API accepts them)
        label_1..label_n  -> the fact's tag "label_1.label_2....label_n" (LangGraph labels
                             never contain ".", so the tag maps back to the labels)
    key                   -> the fact's feature
    value (a dict)        -> kept whole in the fact's metadata ("langgraph"); the fact's
                             value is the item's searchable text (below)

So ``store.put(("ana", "memories"), "k1", {"text": "likes pizza"})`` sets the fact
``memories / k1 = "likes pizza"`` of user ``ana`` (source ``langgraph``): it shows up in
her profile, in searches and memory prompts, and ``DELETE /v1/users/ana`` forgets it with
everything else. Facts memmachine holds from elsewhere (set over REST, extracted from
conversations) appear as items too, with value ``{"value": <the fact's value>}``.

A namespace always starts with the user: a search or listing that does not name one
(``()``) raises ``InvalidNamespaceError``, as does writing to ``(user_id,)`` alone. Every
write passes memmachine's write gate: personal data in a value is redacted, an
instruction-like value is refused (``InvalidInputError``) and nothing of that request is
stored (a batch's consecutive puts for one user go in one request, up to 100 items). A key
or label holding personal data would be stored redacted, under a key no ``get`` could
find: such an item is removed again and the put refused (``InvalidInputError``, field
``key``).

Search: with ``query``, items are ranked by memmachine's profile retrieval (BM25 and, with
an embedder, vectors, fused), best first, each with its ``score``; only the user's
``candidates`` best facts are considered, and only facts that match the query at all are
returned. Without ``query``, all the user's items under the prefix, newest update first.
``filter`` (exact values, nested dicts, and ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``,
``$lte``) applies to the item's value before ``offset`` and ``limit``.

Indexing: memmachine indexes every fact, so an item's searchable text is always built:
from the ``index`` fields given to ``put`` (LangGraph's path syntax), else from the store's
``index_fields``, else from every string, number and boolean in the value. ``index=False``
cannot keep an item out of search. TTLs are not supported (``supports_ttl`` is False).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    get_text_at_path,
    validate_op_namespace,
)

from memmachine_sdk import models as m
from memmachine_sdk._client import AsyncClient, Client
from memmachine_sdk._requests import invalid
from memmachine_sdk.integrations._bridge import Clients, Plan, Step

__all__ = ["MemMachineStore"]

#: The fact source recorded for items written through the store.
SOURCE = "langgraph"
#: The metadata key holding an item's value.
VALUE_KEY = "langgraph"
_SEPARATOR = "."
_PUT_CHUNK = 100


class MemMachineStore(BaseStore):
    """A LangGraph ``BaseStore`` on memmachine profile memory; see the module docstring
    for the mapping.

    * ``client`` / ``async_client``: the SDK client(s) to talk through (at least one; async
      calls without ``async_client`` run ``client`` in a worker thread).
    * ``index_fields``: default fields (LangGraph path syntax) of an item's searchable text.
    * ``candidates``: how many of the user's best-matching facts a ``query`` search ranks
      (at most the server's ``max_top_k``, 100 by default).
    * ``page_size``: facts per request when listing a user's facts.
    """

    supports_ttl = False

    def __init__(
        self,
        client: Client | None = None,
        *,
        async_client: AsyncClient | None = None,
        index_fields: Sequence[str] | None = None,
        candidates: int = 100,
        page_size: int = 1000,
    ) -> None:
        self._clients = Clients(client, async_client, owner="MemMachineStore")
        self.index_fields = list(index_fields) if index_fields else None
        self.candidates = candidates
        self.page_size = page_size

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order with the blocking client; one result per op."""
        return self._clients.run(self._batch(list(ops)))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order with the async client; one result per op."""
        return await self._clients.arun(self._batch(list(ops)))

    # ------------------------------------------------------------------ plans

    def _batch(self, ops: list[Op]) -> Plan[list[Result]]:
        for op in ops:
            validate_op_namespace(op)
        results: list[Result] = []
        writes: list[PutOp] = []  # consecutive puts of one user, sent together
        for op in ops:
            if isinstance(op, PutOp) and op.value is not None:
                if writes and _user_of(writes[0].namespace) != _user_of(op.namespace):
                    yield from self._put(writes)
                    writes = []
                writes.append(op)
                results.append(None)
                continue
            if writes:
                yield from self._put(writes)
                writes = []
            results.append((yield from self._run(op)))
        if writes:
            yield from self._put(writes)
        return results

    def _run(self, op: Op) -> Plan[Result]:
        if isinstance(op, GetOp):
            return (yield from self._get(op))
        if isinstance(op, SearchOp):
            return (yield from self._search(op))
        if isinstance(op, ListNamespacesOp):
            return (yield from self._list_namespaces(op))
        if isinstance(op, PutOp):
            yield from self._delete(op)
            return None
        raise ValueError(f"unknown operation {type(op).__name__}")

    def _get(self, op: GetOp) -> Plan[Item | None]:
        user, tag = _split(op.namespace, "get")
        facts = yield _profile_step(user, tag=tag, feature=op.key)
        return _item(facts[0]) if facts else None

    def _put(self, ops: Sequence[PutOp]) -> Plan[None]:
        user = _user_of(ops[0].namespace)
        latest: dict[tuple[str, str], PutOp] = {}
        for op in ops:
            latest[(_split(op.namespace, "put")[1], op.key)] = op
        facts = [
            {
                "tag": tag,
                "feature": key,
                "value": self._text(op),
                "source": SOURCE,
                "metadata": {VALUE_KEY: dict(op.value or {})},
            }
            for (tag, key), op in latest.items()
        ]
        for start in range(0, len(facts), _PUT_CHUNK):
            chunk = facts[start : start + _PUT_CHUNK]
            stored = yield _set_step(user, chunk)
            yield from _refuse_altered_keys(user, chunk, stored)

    def _delete(self, op: PutOp) -> Plan[None]:
        user, tag = _split(op.namespace, "delete")
        yield _delete_step(user, tag, op.key)

    def _search(self, op: SearchOp) -> Plan[list[SearchItem]]:
        user, _ = _split(op.namespace_prefix, "search", labels_needed=0)
        facts: list[m.FactOut]
        if op.query:
            facts = yield _search_step(user, op.query, self.candidates)
        else:
            facts = yield from self._all_facts(user)
            facts.sort(key=lambda fact: fact.updated_at, reverse=True)
        found = []
        for fact in facts:
            item = _item(fact, score=fact.score if op.query else None)
            prefix = op.namespace_prefix
            if item.namespace[: len(prefix)] == prefix and _matches(item.value, op.filter):
                found.append(item)
        return found[op.offset : op.offset + op.limit]

    def _list_namespaces(self, op: ListNamespacesOp) -> Plan[list[tuple[str, ...]]]:
        conditions = op.match_conditions or ()
        users = [
            c.path[0]
            for c in conditions
            if c.match_type == "prefix" and c.path and c.path[0] != "*"
        ]
        if not users:
            raise InvalidNamespaceError(
                "memmachine keeps memory per user: list_namespaces needs a prefix that "
                "starts with the user id, e.g. prefix=('ana',)"
            )
        facts = yield from self._all_facts(_checked_user(users[0]))
        namespaces = {_namespace(fact) for fact in facts}
        kept = {
            ns[: op.max_depth] if op.max_depth is not None else ns
            for ns in namespaces
            if all(_namespace_matches(c, ns) for c in conditions)
        }
        return sorted(kept)[op.offset : op.offset + op.limit]

    def _all_facts(self, user: str) -> Plan[list[m.FactOut]]:
        facts: list[m.FactOut] = []
        while True:
            page = yield _profile_step(user, limit=self.page_size, offset=len(facts))
            facts.extend(page)
            if len(page) < self.page_size:
                return facts

    def _text(self, op: PutOp) -> str:
        """The searchable text of ``op``'s value: its ``index`` fields, else the store's,
        else every scalar in it; the key when all of those are empty."""
        value = dict(op.value or {})
        fields = op.index if isinstance(op.index, list) else self.index_fields
        texts = [text for path in fields or () for text in get_text_at_path(value, path)]
        text = "; ".join(t for t in texts if t.strip()) or _scalars_text(value)
        return text or op.key


# ---------------------------------------------------------------------- steps


def _profile_step(
    user: str,
    *,
    tag: str | None = None,
    feature: str | None = None,
    limit: int | None = None,
    offset: int | None = None,
) -> Step:
    return lambda c: c.get_profile(
        user_id=user, tag=tag, feature=feature, limit=limit, offset=offset
    )


def _set_step(user: str, facts: list[dict[str, Any]]) -> Step:
    return lambda c: c.set_profile(facts, user_id=user)


def _delete_step(user: str, tag: str, feature: str) -> Step:
    return lambda c: c.delete_facts(user_id=user, tag=tag, feature=feature)


def _search_step(user: str, query: str, top_k: int) -> Step:
    return lambda c: c.search_profile(query, user_id=user, top_k=top_k)


def _delete_fact_step(user: str, fact_id: str) -> Step:
    return lambda c: c.delete_fact(fact_id, user_id=user)


def _refuse_altered_keys(
    user: str, sent: list[dict[str, Any]], stored: list[m.FactOut]
) -> Plan[None]:
    """The write gate redacts personal data in tags and features too: an item stored under
    another key than its own could never be read back by it, so it is removed again and
    the put refused, naming the key."""
    wanted = {(fact["tag"], fact["feature"]) for fact in sent}
    altered = [fact for fact in stored if (fact.tag, fact.feature) not in wanted]
    for fact in altered:
        yield _delete_fact_step(user, fact.id)
    if altered:
        keys = sorted(wanted - {(fact.tag, fact.feature) for fact in stored})
        raise invalid(
            "key",
            f"{keys[0][1]!r} in namespace ({user!r}, {keys[0][0]!r}) holds personal data "
            "memmachine redacts before storing; use an opaque key such as a uuid",
        )


# ---------------------------------------------------------------------- mapping

_ID = re.compile(m.ID_PATTERN)


def _checked_user(user: str) -> str:
    if not _ID.fullmatch(user):
        raise InvalidNamespaceError(
            f"the first namespace label is the memmachine user id; {user!r} is not a valid "
            "id (1-128 letters, digits or ._@+-=#~|)"
        )
    return user


def _user_of(namespace: tuple[str, ...]) -> str:
    return namespace[0] if namespace else ""


def _split(namespace: tuple[str, ...], what: str, *, labels_needed: int = 1) -> tuple[str, str]:
    """``(user_id, tag)`` of ``namespace``; raises ``InvalidNamespaceError`` when it does
    not start with a user id or has fewer than ``labels_needed`` labels after it."""
    if len(namespace) < 1 + labels_needed:
        shape = "(user_id, label, ...)" if labels_needed else "(user_id, ...)"
        raise InvalidNamespaceError(
            f"memmachine keeps memory per user: {what} needs a namespace {shape}, got {namespace!r}"
        )
    return _checked_user(namespace[0]), _SEPARATOR.join(namespace[1:])


def _namespace(fact: m.FactOut) -> tuple[str, ...]:
    return (fact.user_id, *fact.tag.split(_SEPARATOR))


def _item(fact: m.FactOut, *, score: float | None = None) -> SearchItem:
    stored = fact.metadata.get(VALUE_KEY)
    value = dict(stored) if isinstance(stored, Mapping) else {"value": fact.value}
    return SearchItem(
        namespace=_namespace(fact),
        key=fact.feature,
        value=value,
        created_at=fact.created_at,
        updated_at=fact.updated_at,
        score=score,
    )


def _scalars_text(value: Any) -> str:
    """Every string, number and boolean in ``value``: ``field: text`` joined by ``; ``,
    or the bare text when there is only one."""
    pairs: list[tuple[str, str]] = []

    def walk(node: Any, name: str) -> None:
        if isinstance(node, Mapping):
            for key, inner in node.items():
                walk(inner, str(key))
        elif isinstance(node, list | tuple):
            for inner in node:
                walk(inner, name)
        elif node is not None and str(node).strip():
            pairs.append((name, str(node)))

    walk(value, "")
    if len(pairs) == 1:
        return pairs[0][1]
    return "; ".join(f"{name}: {text}" if name else text for name, text in pairs)


# ---------------------------------------------------------------------- filters

_OPERATORS = {"$eq", "$ne", "$gt", "$gte", "$lt", "$lte"}


def _matches(value: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    """Whether ``value`` satisfies LangGraph's ``filter``: every key's condition holds."""
    return all(_holds(value.get(key), wanted) for key, wanted in (filter or {}).items())


def _holds(actual: Any, wanted: Any) -> bool:
    if isinstance(wanted, Mapping):
        operators = [key for key in wanted if key.startswith("$")]
        if operators:
            return all(_compare(actual, op, wanted[op]) for op in operators)
        if not isinstance(actual, Mapping):
            return False
        return all(_holds(actual.get(key), inner) for key, inner in wanted.items())
    return bool(actual == wanted)


def _compare(actual: Any, operator: str, operand: Any) -> bool:
    if operator not in _OPERATORS:
        raise ValueError(f"unsupported filter operator {operator!r}; use one of {_OPERATORS}")
    if operator == "$eq":
        return bool(actual == operand)
    if operator == "$ne":
        return bool(actual != operand)
    try:
        if operator == "$gt":
            return bool(actual > operand)
        if operator == "$gte":
            return bool(actual >= operand)
        if operator == "$lt":
            return bool(actual < operand)
        return bool(actual <= operand)
    except TypeError:  # None, or a string against a number: no order, no match
        return False


def _namespace_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = condition.path
    if not path:
        return True
    if len(namespace) < len(path):
        return False
    part = namespace[: len(path)] if condition.match_type == "prefix" else namespace[-len(path) :]
    return all(want in ("*", have) for want, have in zip(path, part, strict=True))
