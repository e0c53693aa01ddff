"""Every store write of the core and the server takes its data straight from the write gate.

The walk reads the source of every module in ``memmachine/`` (but the adapters, which
implement the ports, and the composition root, which builds them) and in the server. It
finds each call of a store port's write method — on an attribute or name typed with a store
port, or on an attribute that some class of the core declares with a port type (such as the
manager's ``profile``) — and requires every argument that carries stored data to be a call
of a :class:`~memmachine.safety.gate.WriteGate` method. A new store write outside the gate,
or a new write method on a port that nobody classified, fails the test.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from memmachine.ports import (
    BlobStore,
    EpisodeStore,
    JobQueue,
    ProfileStore,
    RetentionPolicyStore,
    StateBackend,
    WorkingMemoryStore,
)
from memmachine.ports.procedures import ProcedureStore
from memmachine.safety.gate import WriteGate
from tests.conftest import REPO_ROOT

PORTS: dict[str, type] = {
    "EpisodeStore": EpisodeStore,
    "ProfileStore": ProfileStore,
    "WorkingMemoryStore": WorkingMemoryStore,
    "StateBackend": StateBackend,
    "JobQueue": JobQueue,
    "BlobStore": BlobStore,
    "ProcedureStore": ProcedureStore,
    "RetentionPolicyStore": RetentionPolicyStore,
}
#: The write methods of each store port and the parameters that carry what is stored.
WRITES: dict[str, dict[str, tuple[str, ...]]] = {
    "EpisodeStore": {"add_episodes": ("records",)},
    "ProfileStore": {
        "upsert_facts": ("records",),
        "apply_facts": ("records", "reason"),
        "invalidate_fact": ("reason",),
        # an import puts back the times and ids of facts it wrote through the gate: no text
        "restore_fact_times": (),
        # the retention sweep swaps removed episode ids for a constant marker: no text
        "mark_sources_expired": (),
    },
    "WorkingMemoryStore": {"append": ("messages",), "put": ("messages", "state", "summary")},
    "StateBackend": {"put": ("envelope",)},
    "JobQueue": {"enqueue": ("payload",)},
    # an attachment's bytes are kept as sent; the text they become (caption, description,
    # transcript) is stored as an episode through the gate (memmachine/memory/attachments.py)
    "BlobStore": {"put": ()},
    # policies are ids, numbers and tags the settings model validates, set by an admin
    "RetentionPolicyStore": {"put_policies": ()},
    # sources, use counts and outcomes are ids and flags the service makes, not text
    "ProcedureStore": {
        "save": ("record", "reason"),
        "add_sources": (),
        "record_use": (),
        "set_outcome": (),
    },
}
#: Everything else a store port does: reads, deletes, lifecycle, and the queue's own
#: bookkeeping of a job's progress (``fail`` records a worker's error text: see the gate's
#: module docstring for what is left to widen).
NOT_WRITES: dict[str, set[str]] = {
    "EpisodeStore": {
        "adjacent",
        "episode_timeline",
        "list_sessions",
        "list_users",
        "list_projects",
        "count_episodes",
        "delete_episode",
        "delete_episodes",
        "fulltext_search",
        "get_episode",
        "get_episodes",
        "index_entries",
        "index_state",
        "list_episodes",
        "neighbours",
        "vector_search",
    },
    "ProfileStore": {
        "delete_expired_versions",
        "list_users",
        "list_projects",
        "delete_fact",
        "delete_facts",
        "detach_episodes",
        "fact_history",
        "get_fact",
        "list_facts",
        "list_fact_versions",
        "search_facts",
    },
    "WorkingMemoryStore": {
        "delete",
        "delete_user",
        "get",
        "list_projects",
        "list_sessions",
        "list_users",
    },
    "StateBackend": {
        "delete",
        "delete_session",
        "delete_user",
        "get",
        "list_user",
        "scopes_holding",
    },
    "ProcedureStore": {
        "by_goal",
        "delete",
        "detach_user",
        "get",
        "get_outcome",
        "history",
        "list_procedures",
        "search",
    },
    "JobQueue": {
        "claim",
        "complete",
        "count_jobs",
        "fail",
        "forget",
        "get",
        "list_jobs",
        "purge_dead",
        "purge_finished",
        "replay",
        "stats",
    },
}
NOT_WRITES["BlobStore"] = {"count", "forget", "read", "release"}
NOT_WRITES["RetentionPolicyStore"] = {"all_policies"}
LIFECYCLE = {"start", "close", "health"}
GATE_METHODS = {
    name
    for name, value in vars(WriteGate).items()
    if inspect.isfunction(value) and not name.startswith(("_", "check"))
}

WALKED = [
    path
    for root in (REPO_ROOT / "memmachine", REPO_ROOT / "server" / "memmachine_server")
    for path in sorted(root.rglob("*.py"))
    if not {"adapters", "bootstrap"} & set(path.relative_to(root).parts)
]


@dataclass
class Finding:
    where: str
    problem: str


Ports = frozenset[str]


def _mentions_port(annotation: ast.expr | None) -> Ports:
    """The store ports an annotation names (``X``, ``X | Y | None``, ``"X"``)."""
    if annotation is None:
        return frozenset()
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return frozenset()
    names = {
        node.id if isinstance(node, ast.Name) else getattr(node, "attr", None)
        for node in ast.walk(annotation)
    }
    return frozenset(str(name) for name in names if name in PORTS)


def port_attributes(trees: dict[str, ast.Module]) -> dict[str, Ports]:
    """Attribute names that some class declares with a store port type: class annotations
    (dataclass fields, protocol members), properties and methods returning a port,
    ``self.x: Port`` and ``self.x = param`` with a port-typed parameter."""
    found: dict[str, Ports] = {}

    def add(name: str, ports: Ports) -> None:
        if ports:
            found[name] = found.get(name, frozenset()) | ports

    for tree in trees.values():
        for cls in (node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)):
            for item in cls.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    add(item.target.id, _mentions_port(item.annotation))
                if not isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                # a property, or a method handing out a port: ``self._queue().enqueue(...)``
                add(item.name, _mentions_port(item.returns))
                params = {a.arg: _mentions_port(a.annotation) for a in _arguments(item)}
                for node in ast.walk(item):
                    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Attribute):
                        add(node.target.attr, _mentions_port(node.annotation))
                    for target, value in _assignments(node):
                        if isinstance(target, ast.Attribute) and isinstance(value, ast.Name):
                            add(target.attr, params.get(value.id, frozenset()))
    return found


def _arguments(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
    args = function.args
    return [*args.posonlyargs, *args.args, *args.kwonlyargs]


def _assignments(node: ast.AST) -> Iterator[tuple[ast.expr, ast.expr]]:
    if isinstance(node, ast.Assign):
        for target in node.targets:
            if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                yield from zip(target.elts, node.value.elts, strict=False)
            else:
                yield target, node.value
    elif isinstance(node, ast.AnnAssign) and node.value is not None:
        yield node.target, node.value


def _is_gate_call(node: ast.expr) -> bool:
    """``<...>.gate.<method>(...)`` / ``<...>._gate.<method>(...)`` / ``gate.<method>(...)``."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return False
    if node.func.attr not in GATE_METHODS:
        return False
    owner = node.func.value
    name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", None)
    return name in ("gate", "_gate")


def check_module(
    where: str, tree: ast.Module, attributes: dict[str, Ports]
) -> tuple[list[Finding], int]:
    """The store writes of one module that do not take their data from the gate, and how
    many store writes the module makes."""
    findings: list[Finding] = []
    writes = 0
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    for function in functions:
        typed = {a.arg: _mentions_port(a.annotation) for a in _arguments(function)}

        def ports_of(node: ast.expr, typed: dict[str, Ports] = typed) -> Ports:
            if isinstance(node, ast.Name):
                return typed.get(node.id, frozenset())
            if isinstance(node, ast.Attribute):
                return attributes.get(node.attr, frozenset())
            if isinstance(node, ast.Call):
                return ports_of(node.func)
            return frozenset()

        for node in ast.walk(function):  # names bound to a port stay ports
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                typed[node.target.id] = typed.get(node.target.id, frozenset()) | _mentions_port(
                    node.annotation
                )
            for target, value in _assignments(node):
                if isinstance(target, ast.Name) and (ports := ports_of(value)):
                    typed[target.id] = typed.get(target.id, frozenset()) | ports
        for node in ast.walk(function):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            method = node.func.attr
            ports = sorted(p for p in ports_of(node.func.value) if method in WRITES[p])
            if not ports:
                continue
            writes += 1
            label = f"{where}:{node.lineno} .{method}"
            matched = False
            for port in ports:
                signature = inspect.signature(getattr(PORTS[port], method))
                try:
                    bound = signature.bind(
                        None,
                        *(arg for arg in node.args if not isinstance(arg, ast.Starred)),
                        **{kw.arg: kw.value for kw in node.keywords if kw.arg is not None},
                    )
                except TypeError:
                    continue
                matched = True
                for parameter in WRITES[port][method]:
                    value = bound.arguments.get(parameter)
                    if value is None or (isinstance(value, ast.Constant) and value.value is None):
                        continue
                    if not _is_gate_call(value):
                        problem = f"{port}: {parameter}={ast.unparse(value)} skips the gate"
                        findings.append(Finding(label, problem))
            if not matched:
                findings.append(Finding(label, f"arguments match no {'/'.join(ports)} write"))
    return findings, writes


def walk(paths: list[Path]) -> tuple[list[Finding], int]:
    trees = {str(path.relative_to(REPO_ROOT)): ast.parse(path.read_text()) for path in paths}
    attributes = port_attributes(trees)
    findings: list[Finding] = []
    writes = 0
    for where, tree in trees.items():
        found, count = check_module(where, tree, attributes)
        findings += found
        writes += count
    return findings, writes


def test_every_store_port_method_is_classified() -> None:
    for name, port in PORTS.items():
        methods = {n for n, v in vars(port).items() if inspect.isfunction(v) and n[0] != "_"}
        assert methods - LIFECYCLE == set(WRITES[name]) | NOT_WRITES[name], name


def test_every_store_write_takes_its_data_from_the_gate() -> None:
    findings, writes = walk(WALKED)
    assert findings == []
    # The services' writes: episodes, facts (upsert, apply, restore, invalidate), working
    # memory (append twice, put), custom records, agent state, and the two job kinds.
    assert writes >= 12


def _walk_source(tmp_path: Path, source: str) -> list[Finding]:
    module = tmp_path / "service.py"
    module.write_text(source)
    trees = {"service.py": ast.parse(source)}
    return check_module("service.py", trees["service.py"], port_attributes(trees))[0]


@pytest.mark.parametrize(
    "body",
    [
        "await self._store.upsert_facts(scope, facts)",
        "await self._store.upsert_facts(scope, records=[f for f in facts])",
        "store = self._store\n        await store.put(scope, state=state)",
        "await self._store.apply_facts(scope, self._gate.facts(facts), invalidate=[], "
        "reason=reason)",
        "await self._store.put(scope, summary=self._gate.summary(text), state=state)",
    ],
)
def test_the_walk_catches_an_ungated_write(tmp_path: Path, body: str) -> None:
    source = f"""
from memmachine.ports import ProfileStore, WorkingMemoryStore

class Service:
    def __init__(self, store: ProfileStore | WorkingMemoryStore, gate) -> None:
        self._store = store
        self._gate = gate

    async def write(self, scope, facts, state, text, reason) -> None:
        {body}
"""
    assert len(_walk_source(tmp_path, source)) == 1


def test_the_walk_accepts_gated_writes_and_reads(tmp_path: Path) -> None:
    source = """
from memmachine.ports import ProfileStore

class Service:
    def __init__(self, store: ProfileStore, gate) -> None:
        self._store = store
        self._gate = gate

    async def write(self, scope, facts, reason) -> None:
        await self._store.get_fact(scope, "id")
        await self._store.apply_facts(
            scope, self._gate.facts(facts), invalidate=[], reason=self._gate.reason(reason)
        )
"""
    assert _walk_source(tmp_path, source) == []
