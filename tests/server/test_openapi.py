"""The OpenAPI document tells the truth.

The core of it is a matrix: for every operation in ``/openapi.json``, requests that are
wrong in every way the document lets one be wrong (no key, a bad key, a key without the
right, over its rate limit; the user missing or malformed; each body field of the wrong
type, an unknown field, bad JSON, a body over the size limit; each query parameter out of
range; each path id unknown or malformed; a stale version) go to a real app, and every
status that comes back must be one the operation documents, with a body of the
documented error schema. The other way round, every documented 4xx must be one the
matrix provoked, so the document does not cry wolf either. A store outage leg does the
same for 503.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from fastapi.testclient import TestClient

from memmachine.config import EmbeddingSettings, LimitSettings
from memmachine_server.app import create_app
from memmachine_server.openapi import EXAMPLES
from tests.server.conftest import make_settings

ADMIN = "openapi-admin-key-0123456789"
LIMITS = LimitSettings(max_request_bytes=64 * 1024)
READING_LIST = "examples.custom_memory_type:ReadingList"
SCOPE_IDS = ("user_id", "session_id", "agent_id", "group_id", "org_id", "project_id")
METHODS = ("get", "put", "post", "delete", "patch")
#: Probes whose body is wrong as a whole: their 422 names no field.
WHOLE_BODY = ("broken JSON", "a JSON list")

#: Documented statuses the matrix cannot provoke on demand, and why they are documented.
#: Procedural memory: operations on an application's procedures, which no user owns.
APP_OPERATIONS = {
    "add_procedure",
    "list_procedures",
    "search_procedures",
    "get_procedure",
    "procedure_history",
    "report_procedure_use",
    "delete_procedure",
}
NOT_PROVOKED = {
    # a compaction whose session is written to twice while it runs
    ("compact_working", 409),
    # a custom type whose records keep changing under concurrent writers
    ("store_custom", 409),
    # procedures are the application's: no user id to malform, and a malformed org, project
    # or agent id (a 422, as tests/server/test_procedures.py checks) is not probed here
    ("get_procedure", 422),
    ("delete_procedure", 422),
    ("procedure_history", 422),
}


@dataclass
class Probe:
    """One request: the operation's path template filled with ``path``."""

    operation: str
    method: str
    template: str
    path: dict[str, str] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None
    content: bytes | None = None
    #: A multipart body: its files (``name: (filename, bytes, type)``) and form fields.
    files: dict[str, Any] | None = None
    what: str = "valid"

    def url(self) -> str:
        url = self.template
        for name, value in self.path.items():
            url = url.replace("{" + name + "}", value.replace(" ", "%20").replace("!", "%21"))
        return url

    def send(self, app: TestClient) -> Any:
        extra: dict[str, Any] = {}
        if self.files is not None:
            extra["files"] = self.files
            extra["headers"] = self.headers
        elif self.content is not None:
            extra["content"] = self.content
            extra["headers"] = {**self.headers, "content-type": "application/json"}
        else:
            extra["headers"] = self.headers
            if self.body is not None:
                extra["json"] = self.body
        return app.request(self.method, self.url(), params=self.params, **extra)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for template, item in document["paths"].items():
        for method, operation in item.items():
            if method in METHODS:
                yield template, method, operation


def resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        target: Any = document
        for part in schema["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        schema = target
    return schema


def validator(document: dict[str, Any], schema: dict[str, Any]) -> jsonschema.Validator:
    """A JSON-schema validator for ``schema`` whose ``#/components/...`` references
    resolve in ``document`` (OpenAPI 3.1 schemas are JSON Schema 2020-12)."""
    root = {**schema, "components": document["components"]}
    return jsonschema.Draft202012Validator(root)


def documented_errors(operation: dict[str, Any]) -> set[int]:
    return {int(status) for status in operation["responses"] if not status.startswith("2")}


def request_schema(document: dict[str, Any], operation: dict[str, Any]) -> dict[str, Any] | None:
    content = operation.get("requestBody", {}).get("content", {}).get("application/json")
    if content is None:
        return None
    schema: dict[str, Any] = content["schema"]
    for variant in schema.get("anyOf", []):  # an optional body: the model or null
        if "$ref" in variant:
            schema = variant
    return resolve(document, schema)


def scoped(operation: dict[str, Any]) -> bool:
    names = {p["name"] for p in operation.get("parameters", [])}
    return "X-Session-ID" in names or "X-User-ID" in names


# --------------------------------------------------------------------------- the app


@dataclass
class World:
    app: TestClient
    document: dict[str, Any]
    keys: dict[str, str]
    ids: dict[str, str]


def _make_key(app: TestClient, **fields: Any) -> dict[str, Any]:
    response = app.post("/v1/admin/keys", json={"tenant": "acme", **fields}, headers=bearer(ADMIN))
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def _seed(app: TestClient, key: str) -> dict[str, str]:
    """Ana's episode, fact, working memory, a compaction job and a procedure, for the probes
    to find."""
    auth = bearer(key)
    added = app.post(
        "/v1/memories",
        json={
            "user_id": "ana",
            "session_id": "s1",
            "messages": [{"content": "My beagle Toast sees the vet on Thursday"}],
        },
        headers=auth,
    )
    assert added.status_code == 201, added.text
    facts = app.post(
        "/v1/profile",
        json={"user_id": "ana", "facts": [{"tag": "pets", "feature": "dog", "value": "beagle"}]},
        headers=auth,
    )
    assert facts.status_code == 200, facts.text
    attached = app.post(
        "/v1/memories/attachments",
        params={"user_id": "ana", "session_id": "s1"},
        files={"file": ("vet.txt", b"Toast weighs 11 kg", "text/plain")},
        headers=auth,
    )
    assert attached.status_code == 201, attached.text
    job = app.post("/v1/sessions/s1/compact", params={"user_id": "ana"}, headers=auth)
    assert job.status_code == 200, job.text
    how = app.post(
        "/v1/procedures", json={"goal": "Book a vet", "steps": ["Call the vet"]}, headers=auth
    )
    assert how.status_code == 201, how.text
    return {
        "procedure_id": how.json()["id"],
        "episode_id": added.json()["episode_ids"][0],
        "fact_id": facts.json()["facts"][0]["id"],
        "job_id": job.json()["job"]["id"],
        "attachment_episode_id": attached.json()["episode_ids"][0],
    }


def _start(data_dir: Path) -> TestClient:
    settings = make_settings(
        data_dir,
        admin_key=ADMIN,
        limits=LIMITS,
        memory_types=[READING_LIST],
        embedding=EmbeddingSettings(provider="none"),
    )
    client = TestClient(create_app(settings), raise_server_exceptions=False)
    client.__enter__()
    return client


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    app = _start(tmp_path_factory.mktemp("openapi"))
    try:
        keys = {
            "rw": _make_key(app, name="rw")["key"],
            "read": _make_key(app, name="read", permissions=["read"])["key"],
            "write": _make_key(app, name="write", permissions=["write"])["key"],
            "tenant-admin": _make_key(app, name="adm", permissions=["admin"])["key"],
            "limited": _make_key(app, name="slow", rate_limit_per_minute=1)["key"],
            "admin": ADMIN,
        }
        ids = _seed(app, keys["rw"])
        ids["key_id"] = _make_key(app, name="to-revoke")["id"]
        yield World(app, app.app.openapi(), keys, ids)  # type: ignore[attr-defined]
    finally:
        app.__exit__(None, None, None)


# --------------------------------------------------------------------------- requests

#: For each operation, a request that succeeds (path ids by name, query, body, key).
_VALID: dict[str, dict[str, Any]] = {
    "get_health": {},
    "add_memories": {
        "body": {"user_id": "ana", "session_id": "s1", "messages": [{"content": "hello"}]}
    },
    "list_memories": {"params": {"user_id": "ana"}},
    "search_memories": {"body": {"user_id": "ana", "query": "dog"}},
    "get_memory": {"path": {"episode_id": "episode_id"}, "params": {"user_id": "ana"}},
    "delete_memory": {"path": {"episode_id": "episode_id"}, "params": {"user_id": "ana"}},
    "upload_attachment": {
        "params": {"user_id": "ana", "session_id": "s1"},
        "files": {"file": ("note.txt", b"Toast likes carrots", "text/plain")},
    },
    "download_attachment": {
        "path": {"episode_id": "attachment_episode_id"},
        "params": {"user_id": "ana"},
    },
    "set_profile": {
        "body": {"user_id": "ana", "facts": [{"tag": "pets", "feature": "cat", "value": "none"}]}
    },
    "get_profile": {"params": {"user_id": "ana"}},
    "delete_facts": {"params": {"user_id": "ana", "tag": "pets", "feature": "cat"}},
    "get_profile_history": {"params": {"user_id": "ana", "tag": "pets", "feature": "dog"}},
    "invalidate_fact": {"path": {"fact_id": "fact_id"}, "body": {"user_id": "ana"}},
    "search_profile": {"body": {"user_id": "ana", "query": "dog"}},
    "get_fact": {"path": {"fact_id": "fact_id"}, "params": {"user_id": "ana"}},
    "delete_fact": {"path": {"fact_id": "fact_id"}, "params": {"user_id": "ana"}},
    "get_working": {"path": {"session_id": "=s1"}, "params": {"user_id": "ana"}},
    "put_working": {"path": {"session_id": "=s1"}, "body": {"user_id": "ana", "state": {}}},
    "delete_working": {"path": {"session_id": "=s1"}, "params": {"user_id": "ana"}},
    "append_working": {
        "path": {"session_id": "=s1"},
        "body": {"user_id": "ana", "messages": [{"content": "hi"}]},
    },
    "compact_working": {"path": {"session_id": "=s1"}, "params": {"user_id": "ana"}},
    "forget_session": {"path": {"session_id": "=s9"}, "params": {"user_id": "ana"}},
    "forget_user": {"path": {"user_id": "=zed"}},
    "memory_prompt": {"body": {"user_id": "ana", "query": "what dog?"}},
    "list_tools": {},
    "execute_tool": {
        "body": {
            "user_id": "ana",
            "tool_call": {
                "id": "c1",
                "function": {"name": "recall", "arguments": '{"query": "dog"}'},
            },
        }
    },
    "list_jobs": {"params": {"user_id": "ana"}},
    "get_job": {"path": {"job_id": "job_id"}, "params": {"user_id": "ana"}},
    "replay_job": {"path": {"job_id": "job_id"}, "params": {"user_id": "ana"}},
    "purge_dead_jobs": {"params": {"user_id": "ana"}},
    "create_key": {"body": {"tenant": "acme", "name": "more"}, "key": "admin"},
    "list_keys": {"key": "admin"},
    "revoke_key": {"path": {"key_id": "key_id"}, "key": "admin"},
    "get_retention": {"key": "admin"},
    "put_retention": {
        "body": {"policies": [{"tenant": "acme", "episodes_max_age_days": 90}]},
        "key": "admin",
    },
    "run_retention_sweep": {"key": "admin"},
    "list_memory_types": {},
    "store_custom": {
        "path": {"name": "=reading_list"},
        "body": {"user_id": "ana", "input": {"title": "Dune"}},
    },
    "retrieve_custom": {"path": {"name": "=reading_list"}, "body": {"user_id": "ana", "input": {}}},
    "whoami": {},
    "list_users": {},
    "get_user": {"path": {"user_id": "=ana"}},
    "list_sessions": {"path": {"user_id": "=ana"}},
    "timeline": {"path": {"user_id": "=ana"}},
    "forget_preview": {"path": {"user_id": "=ana"}},
    "job_counts": {"path": {"user_id": "=ana"}},
    "neighbours": {"path": {"episode_id": "episode_id"}, "params": {"user_id": "ana"}},
    "add_procedure": {"body": {"goal": "Refund a charge", "steps": ["Find it", "Refund it"]}},
    "list_procedures": {},
    "search_procedures": {"body": {"query": "refund"}},
    "get_procedure": {"path": {"procedure_id": "procedure_id"}},
    "procedure_history": {"path": {"procedure_id": "procedure_id"}},
    "report_procedure_use": {"path": {"procedure_id": "procedure_id"}, "body": {"success": True}},
    "delete_procedure": {"path": {"procedure_id": "procedure_id"}},
    "set_session_outcome": {
        "path": {"session_id": "=s1"},
        "body": {"user_id": "ana", "outcome": "failure"},
    },
}


def valid(
    world: World,
    template: str,
    method: str,
    operation: dict[str, Any],
    ids: dict[str, str] | None = None,
) -> Probe:
    """The operation's request from :data:`_VALID`, finding ``ids`` (default: the world's)."""
    name = operation["operationId"]
    spec = _VALID[name]
    ids = world.ids if ids is None else ids
    path = {
        param: value[1:] if value.startswith("=") else ids[value]
        for param, value in spec.get("path", {}).items()
    }
    key = world.keys[spec.get("key", "rw")]
    return Probe(
        name,
        method,
        template,
        path=path,
        params=dict(spec.get("params", {})),
        headers=bearer(key),
        body=json.loads(json.dumps(spec["body"])) if "body" in spec else None,
        files=dict(spec["files"]) if "files" in spec else None,
    )


def _wrong_value(schema: dict[str, Any]) -> Any:
    """A value of a type ``schema`` does not allow."""
    kinds = {schema.get("type")} | {part.get("type") for part in schema.get("anyOf", [])}
    if "string" in kinds or "$ref" in schema or "object" in kinds:
        return ["not", "this"] if "array" not in kinds else 12345
    return {"not": "this"}


def _without_user(probe: Probe) -> Probe:
    body = probe.body
    if isinstance(body, dict):
        body = {k: v for k, v in body.items() if k != "user_id"}
    params = {k: v for k, v in probe.params.items() if k != "user_id"}
    return replace(probe, body=body, params=params, what="no user_id")


def bad_requests(
    world: World, template: str, method: str, operation: dict[str, Any]
) -> list[Probe]:
    """Every wrong variation of the operation's valid request that the document allows
    for. Probes that would succeed act for a user without data (``nobody``)."""
    document = world.document
    good = valid(world, template, method, operation)
    harmless = good
    if isinstance(good.body, dict) and "user_id" in good.body:
        harmless = replace(good, body={**good.body, "user_id": "nobody"})
    elif "user_id" in good.params:
        harmless = replace(good, params={**good.params, "user_id": "nobody"})
    probes = [
        replace(harmless, headers={}, what="no key"),
        replace(harmless, headers=bearer("not-a-key"), what="unknown bearer key"),
        replace(harmless, headers={"X-API-Key": "mm_0000000000000000_nope"}, what="unknown key"),
    ]
    for key in ("read", "write", "tenant-admin", "rw"):
        if key != "rw" or good.headers != bearer(world.keys["rw"]):
            probes.append(replace(harmless, headers=bearer(world.keys[key]), what=f"{key} key"))

    if scoped(operation):
        probes.append(_without_user(good))
        for where in ("header", "query", "body"):
            bad = replace(_without_user(good), what=f"malformed user_id in the {where}")
            if where == "header":
                bad.headers = {**bad.headers, "X-User-ID": "not a valid id!"}
            elif where == "query":
                bad.params = {**bad.params, "user_id": "not a valid id!"}
            elif isinstance(bad.body, dict):
                bad.body = {**bad.body, "user_id": "not a valid id!"}
            else:
                continue
            probes.append(bad)
        if "session_id" not in good.path:
            header_only = _without_user(good)
            header_only.headers = {**header_only.headers, "X-Session-ID": "bad session!"}
            header_only.headers["X-User-ID"] = "nobody"
            probes.append(replace(header_only, what="malformed X-Session-ID"))

    schema = request_schema(document, operation)
    if schema is not None:
        probes.append(replace(harmless, content=b'{"user_id": "nobody", ', what="broken JSON"))
        probes.append(replace(harmless, body=["a", "list"], what="a JSON list"))
        probes.append(replace(harmless, body={**(harmless.body or {}), "bogus": 1}, what="extra"))
        for prop, prop_schema in schema.get("properties", {}).items():
            wrong = {**(harmless.body or {}), prop: _wrong_value(resolve(document, prop_schema))}
            probes.append(replace(harmless, body=wrong, what=f"{prop} of the wrong type"))
            if resolve(document, prop_schema).get("type") == "string":
                long = {**(harmless.body or {}), prop: "x" * 40_000}
                probes.append(replace(harmless, body=long, what=f"{prop} very long"))
        for prop in schema.get("required", []):
            missing = {k: v for k, v in (harmless.body or {}).items() if k != prop}
            probes.append(replace(harmless, body=missing, what=f"{prop} missing"))
        huge = json.dumps({"user_id": "nobody", "pad": "x" * LIMITS.max_request_bytes})
        probes.append(replace(harmless, content=huge.encode(), what="body over the limit"))

    for parameter in operation.get("parameters", []):
        name, where = parameter["name"], parameter["in"]
        if where == "query" and name not in SCOPE_IDS:
            kind = resolve(document, parameter["schema"])
            kinds = {kind.get("type")} | {part.get("type") for part in kind.get("anyOf", [])}
            values = ["many", "-5"] if "integer" in kinds else ["not-an-option"]
            if kinds == {"string", None} or kinds == {"string", "null", None}:
                values = ["", "x" * 300, "nul\x00byte"]
            for value in values:
                bad = replace(harmless, params={**harmless.params, name: value})
                probes.append(replace(bad, what=f"query {name}={value[:10]}"))
        if where == "path":
            # unknown to every other probe (a PUT elsewhere may create what it names)
            for value in (f"missing-{good.operation}", "not a valid id!"):
                probes.append(
                    replace(good, path={**good.path, name: value}, what=f"{name}={value}")
                )
    return probes


def specific_requests(world: World) -> list[Probe]:
    """Failures a generic variation does not reach: a stale version, a job that is not
    dead, a tenant admin naming another tenant, a global admin naming none."""
    rw, admin = bearer(world.keys["rw"]), bearer(ADMIN)
    tenant_admin = bearer(world.keys["tenant-admin"])
    template = "/v1/sessions/{session_id}/working"
    return [
        Probe(
            "put_working",
            "put",
            template,
            path={"session_id": "s1"},
            headers=rw,
            body={"user_id": "ana", "state": {"x": 1}, "expected_version": 999},
            what="stale expected_version",
        ),
        Probe(
            "replay_job",
            "post",
            "/v1/jobs/{job_id}/replay",
            path={"job_id": world.ids["job_id"]},
            params={"user_id": "ana"},
            headers=rw,
            what="a job that is not dead",
        ),
        Probe(
            "purge_dead_jobs",
            "delete",
            "/v1/jobs/dead",
            params={"user_id": "ana", "job_id": world.ids["job_id"]},
            headers=rw,
            what="purging a job that is not dead",
        ),
        Probe(
            "list_keys",
            "get",
            "/v1/admin/keys",
            params={"tenant": "globex"},
            headers=tenant_admin,
            what="another tenant's keys",
        ),
        Probe(
            "create_key",
            "post",
            "/v1/admin/keys",
            headers=admin,
            body={"name": "no tenant"},
            what="the global admin naming no tenant",
        ),
        Probe(
            "add_memories",
            "post",
            "/v1/memories",
            headers=rw,
            body={
                "user_id": "nobody",
                "session_id": "s1",
                "messages": [
                    {
                        "content": "a scan",
                        "attachments": [
                            {"data_uri": "data:image/tiff;base64,AAAA", "caption": "x"}
                        ],
                    }
                ],
            },
            what="an attachment type not accepted",
        ),
        Probe(
            "upload_attachment",
            "post",
            "/v1/memories/attachments",
            params={"user_id": "nobody", "session_id": "s1"},
            headers=rw,
            files={"file": ("scan.tiff", b"II*\x00", "image/tiff")},
            what="an upload type not accepted",
        ),
        Probe(
            "upload_attachment",
            "post",
            "/v1/memories/attachments",
            params={"user_id": "nobody", "session_id": "s1"},
            headers=rw,
            files={"file": ("big.txt", b"x" * (LIMITS.max_request_bytes + 1), "text/plain")},
            what="an upload over the limit",
        ),
    ]


def check_error(document: dict[str, Any], probe: Probe, response: Any) -> None:
    """An error response: no internals, and a body of the documented error schema."""
    assert "Traceback" not in response.text, probe
    assert 'File "' not in response.text, probe
    operation = document["paths"][probe.template][probe.method]
    answer = operation["responses"][str(response.status_code)]
    schema = answer["content"]["application/json"]["schema"]
    validator(document, schema).validate(response.json())
    detail = response.json()["error"]
    if response.status_code == 422 and probe.what not in WHOLE_BODY:
        assert detail.get("field"), (probe.what, response.text)
    if response.status_code == 429:
        assert int(response.headers["Retry-After"]) >= 1
    if response.status_code == 401:
        assert response.headers["WWW-Authenticate"] == "Bearer"


# --------------------------------------------------------------------------- tests


def test_every_status_a_bad_request_gets_is_documented_and_every_documented_one_happens(
    world: World,
) -> None:
    document = world.document
    seen: dict[str, set[int]] = {}
    undocumented: list[str] = []
    probes: list[Probe] = []
    for template, method, operation in operations(document):
        probes += bad_requests(world, template, method, operation)
    probes += specific_requests(world)
    for probe in probes:
        response = probe.send(world.app)
        status = response.status_code
        assert status != 500, (probe.operation, probe.what, response.text)
        if status < 400:
            continue
        seen.setdefault(probe.operation, set()).add(status)
        operation = document["paths"][probe.template][probe.method]
        if str(status) not in operation["responses"]:
            undocumented.append(f"{probe.operation} {probe.what}: {status} {response.text[:200]}")
            continue
        check_error(document, probe, response)

    # the rate limit: the limited key has one request a minute, spent here first
    limited = bearer(world.keys["limited"])
    assert world.app.get("/v1/tools", headers=limited).status_code == 200
    for template, method, operation in operations(document):
        probe = valid(world, template, method, operation)
        if not operation.get("security"):
            continue
        probe = replace(probe, headers=limited, what="over the rate limit")
        response = probe.send(world.app)
        assert response.status_code == 429, (probe.operation, response.text)
        seen.setdefault(probe.operation, set()).add(429)
        check_error(document, probe, response)

    assert undocumented == []
    missing = []
    for _, _, operation in operations(document):
        name = operation["operationId"]
        expected = documented_errors(operation) - {500, 503}
        for status in sorted(expected - seen.get(name, set())):
            if (name, status) not in NOT_PROVOKED:
                missing.append(f"{name} documents {status}, no bad request got it")
    assert missing == []


def _embedded_falkordb_pid(data_dir: Path) -> int:
    """The embedded FalkorDB child working in ``data_dir``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            exe = os.readlink(entry / "exe")
            cwd = Path(os.readlink(entry / "cwd"))
        except OSError:
            continue
        if os.path.basename(exe).startswith("redis-server") and cwd.is_relative_to(data_dir):
            return int(entry.name)
    raise AssertionError(f"no embedded FalkorDB runs in {data_dir}")


def test_a_store_outage_answers_only_documented_statuses(tmp_path: Path) -> None:
    """With the embedded FalkorDB (episodes, working memory, jobs) killed, every valid
    request answers a documented status: 503 where it needs the dead store."""
    app = _start(tmp_path / "outage")
    try:
        keys = {"rw": _make_key(app, name="rw")["key"], "admin": ADMIN}
        ids = _seed(app, keys["rw"])
        ids["key_id"] = _make_key(app, name="to-revoke")["id"]
        world = World(app, app.app.openapi(), keys, ids)  # type: ignore[attr-defined]
        os.kill(_embedded_falkordb_pid(tmp_path / "outage"), signal.SIGKILL)
        time.sleep(0.2)
        unavailable = set()
        for template, method, operation in operations(world.document):
            probe = valid(world, template, method, operation)
            response = probe.send(app)
            assert str(response.status_code) in operation["responses"], (
                probe.operation,
                response.status_code,
                response.text,
            )
            if response.status_code >= 400:
                check_error(world.document, probe, response)
            if response.status_code == 503:
                unavailable.add(probe.operation)
        assert {"add_memories", "search_memories", "get_working", "list_jobs"} <= unavailable
    finally:
        app.__exit__(None, None, None)


def test_success_bodies_match_their_documented_schemas(world: World) -> None:
    """One valid request per operation, each on things made for it; the body is checked
    against the 2xx schema the document gives."""
    document = world.document
    for template, method, operation in operations(document):
        if operation["operationId"] == "replay_job":
            continue  # only a dead job can be replayed; tests/server/test_jobs_api.py does
        ids = _seed(world.app, world.keys["rw"])
        ids["key_id"] = _make_key(world.app, name="to-revoke")["id"]
        probe = valid(world, template, method, operation, ids)
        response = probe.send(world.app)
        status = str(response.status_code)
        assert status.startswith("2"), (probe.operation, response.text)
        answer = operation["responses"][status]
        content = answer.get("content", {}).get("application/json")
        if content is None:
            # bytes of a documented non-JSON type (a download), else nothing
            assert bool(response.content) == bool(answer.get("content")), probe.operation
            continue
        validator(document, content["schema"]).validate(response.json())


# --------------------------------------------------------------------------- declarations


def test_every_scoped_operation_declares_the_ids_as_query_and_headers(world: World) -> None:
    for template, _, operation in operations(world.document):
        if not template.startswith("/v1/") or "/admin/" in template:
            continue
        if operation["operationId"] in ("list_tools", "list_memory_types", "whoami"):
            continue
        declared = {(p["in"], p["name"]) for p in operation["parameters"]}
        if operation["operationId"] in APP_OPERATIONS:  # an application's, no user's
            assert {("header", f"X-{n}-ID") for n in ("Org", "Project", "Agent")} <= declared
            assert not {("query", "user_id"), ("header", "X-User-ID")} & declared
            continue
        if operation["operationId"] == "list_users":  # a whole project: no user, no session
            assert {("header", "X-Org-ID"), ("header", "X-Project-ID")} <= declared
            assert not {("query", "user_id"), ("header", "X-User-ID")} & declared
            continue
        for name, header in (("user_id", "X-User-ID"), ("session_id", "X-Session-ID")):
            if ("path", name) in declared:
                assert ("query", name) not in declared
                assert ("header", header) not in declared
            else:
                assert {("query", name), ("header", header)} <= declared, operation["operationId"]
        for header in ("X-Agent-ID", "X-Group-ID", "X-Org-ID", "X-Project-ID"):
            assert ("header", header) in declared, (operation["operationId"], header)
        schema = request_schema(world.document, operation)
        if schema is not None:
            assert "user_id" in schema["properties"], operation["operationId"]


def test_security_schemes_are_declared_and_every_v1_operation_uses_them(world: World) -> None:
    document = world.document
    schemes = document["components"]["securitySchemes"]
    assert schemes["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": schemes["bearer"]["description"],
    }
    assert (schemes["apiKey"]["in"], schemes["apiKey"]["name"]) == ("header", "X-API-Key")
    for template, _, operation in operations(document):
        if template.startswith("/v1/"):
            assert operation["security"] == [{"bearer": []}, {"apiKey": []}], template
            assert {"401", "429", "503"} <= set(operation["responses"]), template
        else:
            assert "security" not in operation, template


def test_errors_are_documented_with_the_real_body_and_no_other_shape(world: World) -> None:
    document = world.document
    text = json.dumps(document)
    assert "HTTPValidationError" not in text
    for _, _, operation in operations(document):
        for status, answer in operation["responses"].items():
            if status.startswith("2"):
                continue
            content = answer["content"]["application/json"]
            assert content["schema"] == {"$ref": "#/components/schemas/ErrorBody"}
            validator(document, content["schema"]).validate(content["example"])


def test_operation_ids_are_the_route_names_and_every_operation_has_examples(
    world: World,
) -> None:
    document = world.document
    ids = [operation["operationId"] for _, _, operation in operations(document)]
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"[a-z]+(_[a-z]+)*", name) for name in ids), ids
    assert set(ids) == set(EXAMPLES) == set(_VALID)
    for _, _, operation in operations(document):
        body = operation.get("requestBody", {}).get("content", {}).get("application/json")
        if body is not None:
            validator(document, body["schema"]).validate(body["example"])
        for status, answer in operation["responses"].items():
            content = answer.get("content", {}).get("application/json")
            if status.startswith("2") and content is not None:
                validator(document, content["schema"]).validate(content["example"])


def test_the_served_document_is_the_one_described(world: World) -> None:
    served = world.app.get("/openapi.json")
    assert served.status_code == 200
    assert served.json() == world.document
    assert served.json()["info"]["title"] == "memmachine"
