"""Property-based requests over the OpenAPI document (schemathesis): no request, valid or
not, gets a 5xx; and every status the server answers is one the document declares.

Each operation of ``/openapi.json`` gets :data:`EXAMPLES` requests that fit its schema and
as many that break it, sent to the real app (embedded stores, a custom memory type) served
on a loopback port. Bounded for CI: fixed example counts, no deadline, no example database
(hypothesis' cache directory, ``.hypothesis``, ignores itself in git). Every answer is
recorded; the tests then look at what was recorded, so one run serves both checks and a
failure lists every offender.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as hypothesis_settings
from hypothesis.errors import Unsatisfiable

from memmachine.config import EmbeddingSettings
from memmachine_server.background import serve_in_background
from tests.faults.conftest import Report
from tests.server.conftest import make_settings

#: Requests per operation and generation mode (valid / invalid input).
EXAMPLES = 20


@dataclass
class Answers:
    """Every (operation, status) seen, and which of them the document does not declare."""

    statuses: Counter[tuple[str, int]] = field(default_factory=Counter)
    server_errors: list[str] = field(default_factory=list)
    undocumented: Counter[tuple[str, int]] = field(default_factory=Counter)


def _declared(operation: schemathesis.APIOperation) -> tuple[set[int], bool]:
    """The operation's declared statuses (``2XX`` ranges expanded) and whether it has a
    ``default`` response."""
    declared: set[int] = set()
    responses = operation.definition.raw.get("responses", {})
    for key in responses:
        text = str(key).upper()
        if text.endswith("XX") and text[0].isdigit():
            declared.update(range(int(text[0]) * 100, int(text[0]) * 100 + 100))
        elif text.isdigit():
            declared.add(int(text))
    return declared, "default" in responses


def _exercise(operation: schemathesis.APIOperation, url: str, found: Answers) -> None:
    """Send the operation its valid and invalid examples; record every answer."""
    declared, has_default = _declared(operation)
    label = f"{operation.method.upper()} {operation.path}"

    def record(case: schemathesis.Case) -> None:
        response = case.call(base_url=url, timeout=30)
        status = response.status_code
        found.statuses[(label, status)] += 1
        if status >= 500:
            curl = case.as_curl_command()
            found.server_errors.append(f"{label} -> {status}: {response.text[:300]} ({curl})")
        if status not in declared and not has_default:
            found.undocumented[(label, status)] += 1

    bounded = hypothesis_settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):
        try:
            bounded(given(operation.as_strategy(generation_mode=mode))(record))()
        except Unsatisfiable:
            # no parameter or body to break: an operation without input has no invalid form
            assert mode is schemathesis.GenerationMode.NEGATIVE, label


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> Answers:
    settings = make_settings(
        tmp_path_factory.mktemp("schemathesis"),
        embedding=EmbeddingSettings(provider="none"),
        memory_types=["examples.custom_memory_type:ReadingList"],
    )
    found = Answers()
    with serve_in_background(settings) as url:
        schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
        for result in schema.get_all_operations():
            _exercise(result.ok(), url, found)
    return found


def test_no_request_gets_a_server_error(answers: Answers, tally: Report) -> None:
    sent = sum(answers.statuses.values())
    tally(
        case="schemathesis over /openapi.json",
        operations=len({label for label, _ in answers.statuses}),
        requests=sent,
        server_errors=len(answers.server_errors),
        undocumented=sum(answers.undocumented.values()),
    )
    assert answers.server_errors == []


def test_every_status_answered_is_documented(answers: Answers) -> None:
    undocumented = sorted(f"{label} -> {status}" for label, status in answers.undocumented)
    print("undocumented statuses:", *undocumented, sep="\n  ")
    assert undocumented == []
