"""A financial advisor assistant whose client's risk profile and portfolio are profile memory.

    uv run python -m examples.finance_advisor [--data-dir DIR] [--keep]

Sam talks to an onboarding assistant (risk questionnaire, goals, exclusions), then to a
portfolio assistant three months later (holdings, and a change of heart about risk). The
risk profile and the portfolio are stored as profile facts under the tags ``risk_profile``
and ``portfolio``: one current value per feature, older values kept in the fact's history.
After a restart, a third agent, the rebalancing assistant, answers Sam's next question from
that profile without being told any of it again.

Scopes. ``user_id`` is the client (``sam``) in org ``brightpath`` / project ``advice``; each
assistant has its own ``agent_id`` and each meeting its own session. Profile facts are the
client's, whichever agent wrote them; each agent's episode reads use the client scope
without an ``agent_id``, so it sees every meeting. Illustrative only, not financial advice.
"""

from __future__ import annotations

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
    recall_history,
    recall_search,
    reopen_memory,
    run_example,
    show_facts,
)
from memmachine import Settings
from memmachine.models import Scope

__all__ = ["main", "story"]

NAME = "finance_advisor"
CLIENT = Scope(org_id="brightpath", project_id="advice", user_id="sam")
PERSONA = (
    "You are a careful financial advisor assistant. Answer in two or three sentences, using "
    "the client's risk profile, goals, exclusions and current portfolio from memory."
)


def meetings() -> list[Session]:
    """Onboarding in January, a portfolio review in April."""
    onboarding = CLIENT.model_copy(
        update={"agent_id": "onboarding-agent", "session_id": "onboarding-2026-01-12"}
    )
    review = CLIENT.model_copy(
        update={"agent_id": "portfolio-agent", "session_id": "review-2026-04-10"}
    )
    return [
        Session(
            scope=onboarding,
            memory_scope=CLIENT,
            speaker="Sam",
            began=datetime(2026, 1, 12, 9, 0, tzinfo=UTC),
            turns=(
                Say(
                    "I'm 38 and saving for retirement at 60. If my investments fell 20% I "
                    "would be uneasy, but I would not sell.",
                    "Your risk profile: {risk_profile/tolerance} tolerance over "
                    "{risk_profile/horizon}.",
                    facts=(
                        ("risk_profile", "tolerance", "moderate"),
                        ("risk_profile", "horizon", "22 years (retirement at 60)"),
                        ("goals", "retirement", "retire at 60"),
                    ),
                ),
                Say(
                    "I also need 15k EUR for a house deposit within three years, and I never "
                    "want to own tobacco companies.",
                    "Noted: {goals/house_deposit}; exclusion: {preferences/exclusions}.",
                    facts=(
                        ("goals", "house_deposit", "15k EUR within three years"),
                        ("preferences", "exclusions", "no tobacco companies"),
                    ),
                ),
            ),
        ),
        Session(
            scope=review,
            memory_scope=CLIENT,
            speaker="Sam",
            began=datetime(2026, 4, 10, 17, 30, tzinfo=UTC),
            turns=(
                Say(
                    "Here is what I hold now: 55% in a global equity index fund, 30% in euro "
                    "government bonds and 15% in cash.",
                    "Recorded: equities {portfolio/global_equity_index}, bonds "
                    "{portfolio/euro_government_bonds}, cash {portfolio/cash}; that fits a "
                    "{risk_profile/tolerance} profile.",
                    facts=(
                        ("portfolio", "global_equity_index", "55%"),
                        ("portfolio", "euro_government_bonds", "30%"),
                        ("portfolio", "cash", "15%"),
                    ),
                ),
                Say(
                    "I got a raise last month and I'm comfortable taking more risk now.",
                    "Risk tolerance updated to {risk_profile/tolerance}; your house deposit "
                    "({goals/house_deposit}) stays out of it.",
                    facts=(("risk_profile", "tolerance", "moderately aggressive"),),
                ),
            ),
        ),
    ]


def next_question() -> Session:
    """After the restart: a third agent, and a question that needs the whole profile."""
    return Session(
        scope=CLIENT.model_copy(
            update={"agent_id": "rebalancing-agent", "session_id": "rebalance-2026-07-01"}
        ),
        memory_scope=CLIENT,
        speaker="Sam",
        turns=(
            Say(
                "Should I move my cash and my new investments into a technology stocks fund?",
                "With a {risk_profile/tolerance} profile you can add equities, but your cash "
                "({portfolio/cash}) is for the house deposit ({goals/house_deposit}): keep "
                "it. Add to the "
                "global equity index ({portfolio/global_equity_index}) from new savings "
                "instead, keeping the exclusion: {preferences/exclusions}.",
            ),
        ),
    )


async def story(settings: Settings) -> Checks:
    async with open_memory(settings) as memory:
        for meeting in meetings():
            name = str(meeting.scope.agent_id).replace("-agent", " assistant")
            agent = Assistant(memory, name=name, persona=PERSONA)
            await agent.converse(meeting)

    checks = Checks(NAME)
    async with reopen_memory(settings) as memory:
        await recall_facts(memory, "risk profile (tag risk_profile)", CLIENT, tag="risk_profile")
        portfolio = await recall_facts(memory, "portfolio (tag portfolio)", CLIENT, tag="portfolio")
        heading("goals and preferences")
        everything = await memory.list_facts(CLIENT)
        show_facts([f for f in everything if f.tag in ("goals", "preferences")])

        current, versions = await recall_history(memory, CLIENT, "risk_profile", "tolerance")
        hits = await recall_search(
            memory, "search the client's meetings", CLIENT, "house deposit", top_k=3
        )

        question = next_question()
        prompt = await preview_prompt(
            memory, "memory prompt the rebalancing assistant gets", question
        )
        advisor = Assistant(memory, name="rebalancing assistant", persona=PERSONA)
        await advisor.converse(question)

        heading("checks")
        values = {(f.tag, f.feature): f.value for f in everything}
        checks.check(
            "risk tolerance after the restart is 'moderately aggressive', was 'moderate'",
            current is not None
            and current.value == "moderately aggressive"
            and [v.value for v in versions] == ["moderate"],
        )
        weights = {f.feature: f.value for f in portfolio}
        checks.check(
            "portfolio recalled: 55% equity index, 30% bonds, 15% cash",
            weights
            == {"global_equity_index": "55%", "euro_government_bonds": "30%", "cash": "15%"},
        )
        checks.check(
            "goal and exclusion from onboarding recalled",
            values.get(("goals", "house_deposit")) == "15k EUR within three years"
            and values.get(("preferences", "exclusions")) == "no tobacco companies",
        )
        checks.check(
            "search finds the onboarding meeting where the deposit came up",
            any(
                "house deposit" in h.episode.content
                and h.episode.scope.agent_id == "onboarding-agent"
                for h in hits
            ),
        )
        checks.check(
            "the rebalancing agent's prompt has the risk profile, portfolio and exclusion",
            all(
                text in prompt.system
                for text in ("moderately aggressive", "global_equity_index", "no tobacco")
            ),
        )
        checks.check(
            "the prompt holds episodes from both earlier agents",
            {"onboarding-agent", "portfolio-agent"}
            <= {(await memory.get_episode(CLIENT, i)).scope.agent_id for i in prompt.episode_ids},
        )
    return checks


def main(argv: list[str] | None = None) -> int:
    return run_example(
        NAME, "A financial advisor remembering a client's risk profile.", story, argv
    )


if __name__ == "__main__":
    raise SystemExit(main())
