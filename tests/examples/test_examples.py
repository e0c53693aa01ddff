"""The runnable examples, run the way the README says (``python -m examples.<name>`` from the
repository root), each in its own process on its own data directory.

Each must exit 0 and print, after the restart, the values its script wrote before it (proof
that memory was recalled from disk, not from the process) and what one agent recorded in
another agent's view. With a language model configured, the replies and the extracted facts
come from the model. No embedded FalkorDB child may outlive an example.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from memmachine import Settings, open_manager
from memmachine.config import EmbeddingSettings
from memmachine.models import Scope
from tests.conftest import REPO_ROOT
from tests.fakes.llm_fixtures import llm_server  # noqa: F401  (the fixture)
from tests.fakes.llm_server import ChatRequest, ScriptedChatServer

RESTART = "== restart: memory was closed above and is reopened on the same data directory =="
MODEL_REPLY = "Understood, noted in the account file."

#: Per example: the closing line, and patterns that must appear after the restart.
EXPECTED: dict[str, tuple[str, list[str]]] = {
    "crm_agent": (
        "RESULT crm_agent: 7/7 recall checks passed",
        [
            r"deal +stage +negotiation +explicit +call-2026-03-30",
            r"contacts +economic_buyer +Hank Ruiz, CFO, signs off above 50k EUR",
            # The stage's history, each value with the call that recorded it.
            r"discovery +superseded +call-2026-03-02\n +proposal +superseded +call-2026-03-16\n"
            r" +negotiation +current +call-2026-03-30",
            # The support agent's prompt holds the sales agent's calls and facts.
            r"\| - \[2026-03-16 10:30 UTC\] Dana \(account executive\): The Rotterdam pilot",
            r"support assistant \[script\]: Priority ticket: Priya Nair, head of operations is "
            r"our champion on a deal in negotiation \(120k EUR over three years\)",
        ],
    ),
    "finance_advisor": (
        "RESULT finance_advisor: 6/6 recall checks passed",
        [
            r"risk_profile +tolerance +moderately aggressive +explicit +review-2026-04-10",
            r"moderate +superseded +onboarding-2026-01-12",
            r"portfolio +global_equity_index +55%",
            r"portfolio +euro_government_bonds +30%",
            r"preferences +exclusions +no tobacco companies +explicit +onboarding-2026-01-12",
            r"rebalancing assistant \[script\]: With a moderately aggressive profile .* your "
            r"cash \(15%\) is for the house deposit \(15k EUR within three years\)",
        ],
    ),
    "healthcare_navigator": (
        "RESULT healthcare_navigator: 5/5 recall checks passed",
        [
            r"medications +apixaban +5 mg twice daily, anticoagulant +explicit "
            r"+cardiology-2026-02-03",
            r"allergies +penicillin +hives",
            # The care-team search mixes both departments' notes.
            r"cardiology-2026-02-03 +cardiology-agent",
            r"orthopedics-2026-02-17 +orthopedics-agent",
            r"\[ok\] orthopedics' own view holds none of cardiology's notes",
            r"pharmacy navigator \[script\]: Avoid NSAIDs such as ibuprofen: she takes apixaban",
        ],
    ),
    "writing_assistant": (
        "RESULT writing_assistant: 7/7 recall checks passed",
        [
            r"style +spelling +British English +explicit +style-guide-2026-05-04",
            r"style +banned_words +leverage, synergy",
            r"preferences +draft_length +about 900 words +explicit +lena-route-post",
            # Omar never stated the style guide; his assistant applies it anyway.
            r"writing assistant \[script\]: House style applies: British English "
            r"\('colour-coding'\)",
            r"app-level memory of another project \(docs\) ==\n.*\n.*\n +\(nothing\)",
        ],
    ),
}


#: The framework examples (each starts its own memmachine server and uses one adapter of
#: ``memmachine_sdk.integrations`` with the real framework): the closing line, and patterns
#: that must appear in the output.
FRAMEWORKS: dict[str, tuple[str, list[str]]] = {
    "langgraph_memory": (
        "RESULT langgraph_memory: 4/4 recall checks passed",
        [
            r"\[ana-2\] assistant: From memory: I am allergic to peanuts",
            r"\[ben-1\] assistant: I don't know anything about that yet\.",
            r"memories / \w{8}…: I am allergic to peanuts  \(source langgraph\)",
        ],
    ),
    "langchain_history": (
        "RESULT langchain_history: 4/4 recall checks passed",
        [
            r"\[trip-42\] ana: Where do I live\?  \(2 earlier messages\)",
            r"\[trip-42\] assistant: You told me you live in Porto\.",
            r"\[trip-7\] assistant: You haven't told me where you live yet\.",
        ],
    ),
    "openai_agents_memory": (
        "RESULT openai_agents_memory: 4/4 recall checks passed",
        [
            r"\[ana-2\] assistant: From memory: I always travel with my folding bike",
            r"\[ben-1\] assistant: I don't have anything on that\.",
            r"pop_item\(\) removed the message at the end: 3 left",
        ],
    ),
    "llama_index_memory": (
        "RESULT llama_index_memory: 5/5 recall checks passed",
        [
            r"system \| - home / city: Porto",
            r"system \| - \[\d{4}-\d\d-\d\d\] user: I'm vegetarian and allergic to peanuts",
            r"episode in memmachine: user: Our flight to Madeira leaves Saturday",
        ],
    ),
}


def example_env(model_dir: Path | None, **extra: str) -> dict[str, str]:
    """The caller's environment without memmachine or LLM settings, plus the local model."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("MEMMACHINE_", "OPENAI_"))
    }
    if model_dir is not None:
        env["MEMMACHINE_EMBEDDING_MODEL"] = str(model_dir)
    env["PYTHONIOENCODING"] = "utf-8"
    env.update(extra)
    return env


def run(name: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", f"examples.{name}", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def processes_in(path: Path) -> list[str]:
    """Live processes working in ``path`` or naming it on their command line: the embedded
    FalkorDB runs in ``<data dir>/falkordb``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cwd = os.readlink(proc / "cwd")
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (proc / "stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if str(path) in cwd + " " + cmdline and state != "Z":
            found.append(f"{proc.name} in {cwd}: {cmdline.strip()}")
    return found


def data_dir_of(output: str) -> Path:
    match = re.search(r"^\w+: data directory (\S+)$", output, re.MULTILINE)
    assert match, output
    return Path(match[1])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_recalls_after_a_restart_and_across_agents(name: str, model_dir: Path) -> None:
    # The one documented command, with no options: a temporary data directory.
    result = run(name, example_env(model_dir))
    out = result.stdout
    assert result.returncode == 0, f"{out}\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr

    closing, patterns = EXPECTED[name]
    assert out.rstrip().splitlines()[-1] == closing, out
    assert "FAILED" not in out
    assert "scripted replies (no LLM)" in out
    _, restart, after = out.partition(RESTART)
    assert restart, out
    for pattern in patterns:
        assert re.search(pattern, after), f"{pattern!r} not found after the restart:\n{after}"

    # The temporary data directory is gone, and so is the FalkorDB child that served it.
    data_dir = data_dir_of(out)
    assert not data_dir.exists()
    assert processes_in(data_dir) == []


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_passes_without_an_embedding_model(name: str) -> None:
    """With no model, search is lexical-only: the example says so and its checks still pass."""
    result = run(name, example_env(None, MEMMACHINE_EMBEDDING_PROVIDER="none"))
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert "search lexical-only" in result.stdout
    assert result.stdout.rstrip().splitlines()[-1] == EXPECTED[name][0]


def test_quickstart_still_runs(model_dir: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "quickstart"
    result = subprocess.run(
        [sys.executable, "examples/quickstart.py", str(data_dir)],
        cwd=REPO_ROOT,
        env=example_env(model_dir),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    lines = result.stdout.splitlines()
    assert lines[0].endswith("I'm allergic to peanuts")
    assert "beagle named Toast" in result.stdout
    # Ben's search never returns Ana's beagle.
    assert lines[-1] == 'ben: ["I\'m training for the Berlin marathon"]'
    assert processes_in(data_dir) == []


def test_custom_memory_type_example_recalls_its_records_after_a_restart() -> None:
    result = run("custom_memory_type", example_env(None))
    out = result.stdout
    assert result.returncode == 0, f"{out}\n{result.stderr}"
    assert out.rstrip().splitlines()[-1] == "RESULT custom_memory_type: ok", out
    _, restart, after = out.partition(RESTART)
    assert restart, out
    assert "recalled 'The Left Hand of Darkness' by Ursula K. Le Guin (to_read)" in after


def scripted_model(request: ChatRequest) -> str:
    """The loopback model: a fixed chat reply; for extraction, one fact about the account;
    for consolidation, no decisions (so new facts are created)."""
    if "extract durable facts" in request.system_content:
        fact = {
            "tag": "conversation_details",
            "feature": "pilot_site",
            "value": "Rotterdam depot pilot",
            "kind": "explicit",
            "confidence": 0.9,
        }
        return json.dumps({"facts": [fact]})
    if "keep a user's profile consistent" in request.system_content:
        return json.dumps({"decisions": []})
    return MODEL_REPLY


async def test_with_a_language_model_the_replies_and_extracted_facts_come_from_it(
    model_dir: Path,
    tmp_path: Path,
    llm_server: ScriptedChatServer,  # noqa: F811
) -> None:
    llm_server.default = scripted_model
    data_dir = tmp_path / "crm"
    env = example_env(
        model_dir,
        MEMMACHINE_LLM_BASE_URL=llm_server.base_url,
        MEMMACHINE_LLM_MODEL="scripted-model",
        MEMMACHINE_LLM_MAX_RETRIES="0",
    )
    result = run("crm_agent", env, "--data-dir", str(data_dir))
    out = result.stdout
    assert result.returncode == 0, f"{out}\n{result.stderr}"
    assert out.rstrip().splitlines()[-1] == "RESULT crm_agent: 7/7 recall checks passed"
    assert "replies from scripted-model" in out
    assert "[script]" not in out
    assert f"CRM assistant [model]: {MODEL_REPLY}" in out
    assert f"support assistant [model]: {MODEL_REPLY}" in out
    assert "facts extracted by the model: 1" in out
    assert "+ fact conversation_details/pilot_site = Rotterdam depot pilot (user-explicit)" in out

    # The support assistant's request carried memory written by another agent before the
    # restart: the deal stage and the sales calls.
    chats = [r for r in llm_server.completions if "CRM assistant" in r.system_content]
    assert len(chats) == 6  # five sales turns and the ticket
    ticket = chats[-1]
    assert ticket.last_user_content.startswith("Route exports from the Rotterdam pilot")
    assert "deal / stage: negotiation" in ticket.system_content
    assert "Hank Ruiz, their CFO, signs off" in ticket.system_content

    # The data directory given on the command line is kept, and holds the model's fact.
    assert processes_in(data_dir) == []
    # Facts need no embedder to be listed.
    settings = Settings(data_dir=data_dir, embedding=EmbeddingSettings(provider="none"))
    async with open_manager(settings) as memory:
        facts = await memory.list_facts(
            Scope(org_id="acme-sales", project_id="crm", user_id="globex"),
            tag="conversation_details",
        )
    assert [(f.feature, f.value, f.source) for f in facts] == [
        ("pilot_site", "Rotterdam depot pilot", "user-explicit")
    ]


@pytest.mark.parametrize("with_model", [True, False], ids=["hybrid", "lexical-only"])
@pytest.mark.parametrize("name", sorted(FRAMEWORKS))
def test_framework_example_runs_on_the_real_framework(
    name: str, with_model: bool, request: pytest.FixtureRequest
) -> None:
    """Each framework example, run as documented, passes its checks with and without an
    embedding model, and leaves neither its data directory nor a FalkorDB child behind."""
    if with_model:
        env = example_env(request.getfixturevalue("model_dir"))
    else:
        env = example_env(None, MEMMACHINE_EMBEDDING_PROVIDER="none")
    result = run(name, env)
    out = result.stdout
    assert result.returncode == 0, f"{out}\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
    closing, patterns = FRAMEWORKS[name]
    assert out.rstrip().splitlines()[-1] == closing, out
    assert ("search hybrid" if with_model else "search lexical-only") in out
    for pattern in patterns:
        assert re.search(pattern, out), f"{pattern!r} not found in:\n{out}"
    data_dir = data_dir_of(out)
    assert not data_dir.exists()
    assert processes_in(data_dir) == []
