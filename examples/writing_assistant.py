"""A writing assistant that applies a project's style guide, kept as app-level memory.

    uv run python -m examples.writing_assistant [--data-dir DIR] [--keep]

The managing editor, Mia, tells the style-guide agent the blog's house style once. Lena
then drafts a post with the writing assistant, which holds her to that style and learns her
own habits. After a restart a second writer, Omar, opens his first session: the assistant
already knows the house style (nobody told Omar's session), but nothing of Lena's.

Scopes: what "app-level" means here. A memmachine ``Scope`` always names a user; tenant,
org and project always match exactly, and agent, session and group only narrow. There is no
store for "everyone in a project" on its own, so the style guide is kept under a reserved
principal of the project: ``user_id="_project"`` inside org ``northwind`` / project ``blog``.
The style-guide agent writes there; every writer's assistant reads it as well as the
writer's own user scope (``lena``, ``omar``), and adds it to the memory prompt under
``## Project style guide``. Because org and project match exactly, a writer in another
project (``docs``) gets none of it; and each writer's own facts stay theirs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from examples._common import (
    Assistant,
    Checks,
    Say,
    Session,
    heading,
    open_memory,
    preview_prompt,
    recall_facts,
    recall_search,
    reopen_memory,
    run_example,
    shared_block,
)
from memmachine import MemoryManager, Settings
from memmachine.models import Fact, Scope

__all__ = ["APP_USER", "main", "story"]

NAME = "writing_assistant"
#: The reserved principal that holds the project's app-level memory.
APP_USER = "_project"
ORG, PROJECT = "northwind", "blog"
APP = Scope(org_id=ORG, project_id=PROJECT, user_id=APP_USER)
STYLE_GUIDE = "Project style guide"
PERSONA = (
    "You are a writing assistant. Apply the project style guide to every suggestion, and "
    "the writer's own preferences where the guide is silent. Answer in two sentences."
)


def writer(user_id: str, session_id: str) -> Scope:
    return Scope(
        org_id=ORG,
        project_id=PROJECT,
        user_id=user_id,
        agent_id="writing-assistant",
        session_id=session_id,
    )


def style_guide_session() -> Session:
    return Session(
        scope=APP.model_copy(
            update={"agent_id": "style-guide-agent", "session_id": "style-guide-2026-05-04"}
        ),
        speaker="Mia (managing editor)",
        began=datetime(2026, 5, 4, 9, 0, tzinfo=UTC),
        turns=(
            Say(
                "House style for the blog: British spelling, sentence-case headings, and no "
                "Oxford comma.",
                "Saved for every writer on the blog: {style/spelling}, {style/headings} "
                "headings, Oxford comma {style/oxford_comma}.",
                facts=(
                    ("style", "spelling", "British English"),
                    ("style", "headings", "sentence case"),
                    ("style", "oxford_comma", "not used"),
                ),
            ),
            Say(
                "Write in the active voice and address the reader as 'you'. Keep paragraphs "
                "under 80 words, and never use 'leverage' or 'synergy'.",
                "Saved: {style/voice}; paragraphs {style/paragraphs}; banned words: "
                "{style/banned_words}.",
                facts=(
                    ("style", "voice", "active voice, reader addressed as 'you'"),
                    ("style", "paragraphs", "under 80 words"),
                    ("style", "banned_words", "leverage, synergy"),
                ),
            ),
        ),
    )


def lena_session() -> Session:
    return Session(
        scope=writer("lena", "lena-route-post"),
        speaker="Lena",
        began=datetime(2026, 5, 6, 14, 0, tzinfo=UTC),
        turns=(
            Say(
                "I'm drafting a post about our new route optimiser for fleet managers. My "
                "drafts usually run to about 900 words.",
                "I'll keep the draft near {preferences/draft_length} for "
                "{preferences/audience}, in {style/spelling} with {style/headings} headings.",
                facts=(
                    ("preferences", "draft_length", "about 900 words"),
                    ("preferences", "audience", "fleet managers"),
                ),
            ),
            Say(
                "Title idea: 'Leverage Your Fleet With Smarter Routes'.",
                "Two style-guide notes: headings are in {style/headings} and "
                "'{style/banned_words}' are banned. Try: 'Plan smarter routes for your fleet'.",
            ),
        ),
    )


def lena_next_turn() -> Session:
    """After the restart: Lena carries on in the same session."""
    return Session(
        scope=writer("lena", "lena-route-post"),
        speaker="Lena",
        turns=(
            Say(
                "Can you check my intro? 'Our optimiser leverages live traffic data to plan "
                "routes.'",
                "'{style/banned_words}' are banned: try 'Our optimiser uses live traffic data "
                "to plan your routes.' That keeps the {style/voice} rule.",
            ),
        ),
    )


def omar_session() -> Session:
    return Session(
        scope=writer("omar", "omar-release-notes"),
        speaker="Omar",
        turns=(
            Say(
                "I'm writing the release notes for the new color-coding feature.",
                "House style applies: {style/spelling} ('colour-coding'), {style/voice}, "
                "paragraphs {style/paragraphs}. What length do you want? Your usual one: "
                "{preferences/draft_length}.",
            ),
        ),
    )


def style_guide(memory: MemoryManager) -> Callable[[], Awaitable[list[Fact]]]:
    """The app-level facts, read fresh for every turn."""

    async def read() -> list[Fact]:
        return await memory.list_facts(APP)

    return read


def assistant(memory: MemoryManager, name: str = "writing assistant") -> Assistant:
    return Assistant(
        memory,
        name=name,
        persona=PERSONA,
        extra_context=style_guide(memory),
        extra_title=STYLE_GUIDE,
    )


async def story(settings: Settings) -> Checks:
    async with open_memory(settings) as memory:
        editor = Assistant(memory, name="style-guide assistant", persona=PERSONA)
        await editor.converse(style_guide_session())
        await assistant(memory).converse(lena_session())

    checks = Checks(NAME)
    async with reopen_memory(settings) as memory:
        guide = await recall_facts(
            memory, f"app-level memory: the style guide (user {APP_USER}, project {PROJECT})", APP
        )
        hits = await recall_search(
            memory, "search the app-level memory", APP, "Oxford comma", top_k=2
        )
        lena_facts = await recall_facts(
            memory, "Lena's own memory", writer("lena", "lena-route-post")
        )

        # The assistant adds the style guide to the prompt memmachine builds for the writer.
        block = shared_block(STYLE_GUIDE, guide)
        lena = lena_next_turn()
        lena_prompt = await preview_prompt(
            memory,
            "memory prompt for Lena's next turn (her memory + the project style guide)",
            lena,
            preface=block,
        )
        await assistant(memory).converse(lena)

        omar = omar_session()
        prompt = await preview_prompt(
            memory,
            "memory prompt for Omar's first turn (his memory + the project style guide)",
            omar,
            preface=block,
        )
        omar_assistant = assistant(memory)
        await omar_assistant.converse(omar)
        given = {(f.tag, f.feature) for f in omar_assistant.replies[0].extra}
        omar_facts = await memory.list_facts(omar.scope)

        other_project = APP.model_copy(update={"project_id": "docs"})
        elsewhere = await recall_facts(
            memory, "app-level memory of another project (docs)", other_project
        )

        heading("checks")
        style = {f.feature: f.value for f in guide}
        checks.check(
            "the style guide survived the restart (British English, sentence case, 6 rules)",
            len(style) == 6
            and style.get("spelling") == "British English"
            and style.get("headings") == "sentence case",
        )
        checks.check(
            "search of the app-level memory finds the editor's Oxford comma rule",
            any("Oxford comma" in h.episode.content and h.episode.role == "user" for h in hits),
        )
        checks.check(
            "Lena's preferences survived the restart (about 900 words, fleet managers)",
            {f.feature: f.value for f in lena_facts}
            == {"draft_length": "about 900 words", "audience": "fleet managers"},
        )
        checks.check(
            "Lena's next prompt has her length preference and her session's recent messages",
            "about 900 words" in lena_prompt.system and lena_prompt.message_count == 4,
        )
        checks.check(
            "Omar's assistant had all 6 style rules in its context in his first session",
            given == {("style", feature) for feature in style},
        )
        checks.check(
            "Omar's own memory holds nothing of Lena's",
            not omar_facts and "900 words" not in prompt.system,
        )
        checks.check("another project does not see this style guide", not elsewhere)
    return checks


def main(argv: list[str] | None = None) -> int:
    return run_example(NAME, "A writing assistant with a project-wide style guide.", story, argv)


if __name__ == "__main__":
    raise SystemExit(main())
