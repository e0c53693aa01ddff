"""A CRM assistant that remembers a customer account across sales calls.

    uv run python -m examples.crm_agent [--data-dir DIR] [--keep]

An account executive, Dana, debriefs the CRM assistant after three calls with Globex. The
assistant keeps the customer history as episodes and the deal stage, deal value and key
contacts as profile facts. Then memory is closed and reopened on the same data directory
(a restart), and a different agent, the support assistant, takes a ticket from Globex and
sees the whole account: the deal's stage and its history, who signs off, and the calls.

Scopes. The memory's subject is the customer account, so ``user_id`` is the account
(``globex``) inside org ``acme-sales`` / project ``crm``; the sales debriefs carry
``agent_id="sales-agent"`` and the ticket ``agent_id="support-agent"``; every call is its own
session. Profile facts belong to the account whichever agent wrote them. Episode reads with
an ``agent_id`` see only that agent's episodes, so the support assistant reads with the
account scope (no agent) to see the sales calls.
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
)
from memmachine import Settings
from memmachine.models import Scope

__all__ = ["main", "story"]

NAME = "crm_agent"
ACCOUNT = Scope(org_id="acme-sales", project_id="crm", user_id="globex")
SALES = ACCOUNT.model_copy(update={"agent_id": "sales-agent"})
SUPPORT = ACCOUNT.model_copy(update={"agent_id": "support-agent"})
DANA = "Dana (account executive)"
PERSONA = (
    "You are a CRM assistant for a sales team. Confirm what you recorded about the account "
    "in one or two sentences and point out anything the next call must cover."
)


def sales_calls() -> list[Session]:
    """Three debriefs, two weeks apart: discovery, then a proposal, then negotiation."""
    return [
        Session(
            scope=SALES.for_session("call-2026-03-02"),
            speaker=DANA,
            began=datetime(2026, 3, 2, 15, 0, tzinfo=UTC),
            turns=(
                Say(
                    "First call with Globex: a logistics company of about 800 people that plans "
                    "its delivery routes in spreadsheets and wants to replace them.",
                    "Logged Globex ({account/industry}, {account/size}); the deal is at "
                    "{deal/stage}.",
                    facts=(
                        ("account", "industry", "logistics"),
                        ("account", "size", "about 800 employees"),
                        ("deal", "stage", "discovery"),
                    ),
                ),
                Say(
                    "Our champion is Priya Nair, their head of operations. She wants a pilot "
                    "in the Rotterdam depot first.",
                    "Champion on record: {contacts/champion}. Next step: {deal/next_step}.",
                    facts=(
                        ("contacts", "champion", "Priya Nair, head of operations"),
                        ("deal", "next_step", "pilot in the Rotterdam depot"),
                    ),
                ),
            ),
        ),
        Session(
            scope=SALES.for_session("call-2026-03-16"),
            speaker=DANA,
            began=datetime(2026, 3, 16, 10, 30, tzinfo=UTC),
            turns=(
                Say(
                    "The Rotterdam pilot went well. Hank Ruiz, their CFO, signs off on "
                    "anything above 50k EUR and wants a three-year price; I sent a proposal "
                    "for 120k EUR over three years.",
                    "Deal moved to {deal/stage} at {deal/value}; economic buyer: "
                    "{contacts/economic_buyer}. {contacts/champion} stays our champion.",
                    facts=(
                        ("deal", "stage", "proposal"),
                        ("deal", "value", "120k EUR over three years"),
                        ("contacts", "economic_buyer", "Hank Ruiz, CFO, signs off above 50k EUR"),
                    ),
                ),
                Say(
                    "They are also looking at RouteMax, which is cheaper but has no API.",
                    "Noted the competitor: {deal/competitor}.",
                    facts=(("deal", "competitor", "RouteMax: cheaper, but no API"),),
                ),
            ),
        ),
        Session(
            scope=SALES.for_session("call-2026-03-30"),
            speaker=DANA,
            began=datetime(2026, 3, 30, 14, 0, tzinfo=UTC),
            turns=(
                Say(
                    "Legal is reviewing the contract. Hank asked for a 5% discount in "
                    "exchange for the three-year term.",
                    "Deal is now in {deal/stage}; open issue: {deal/open_issue}.",
                    facts=(
                        ("deal", "stage", "negotiation"),
                        ("deal", "open_issue", "5% discount asked by Hank Ruiz for a 3-year term"),
                    ),
                ),
            ),
        ),
    ]


def support_ticket() -> Session:
    """After the restart: another agent, reading the whole account."""
    return Session(
        scope=SUPPORT.for_session("ticket-481"),
        memory_scope=ACCOUNT,
        speaker="Priya Nair (Globex)",
        turns=(
            Say(
                "Route exports from the Rotterdam pilot stopped working this morning.",
                "Priority ticket: {contacts/champion} is our champion on a deal in "
                "{deal/stage} ({deal/value}); I will tell Dana, since {deal/open_issue} "
                "is still open.",
            ),
        ),
    )


async def story(settings: Settings) -> Checks:
    async with open_memory(settings) as memory:
        sales = Assistant(memory, name="CRM assistant", persona=PERSONA)
        for call in sales_calls():
            await sales.converse(call)

    checks = Checks(NAME)
    async with reopen_memory(settings) as memory:
        facts = await recall_facts(memory, "profile facts of the account", ACCOUNT)
        values = {(f.tag, f.feature): f.value for f in facts}
        current, versions = await recall_history(memory, ACCOUNT, "deal", "stage")
        hits = await recall_search(
            memory, "search the account", ACCOUNT, "who signs off on the budget?", top_k=3
        )

        last_call = SALES.for_session("call-2026-03-30")
        working = await memory.get_working(last_call)
        heading(f"working memory of {last_call.session_id}")
        print(f"  {working.message_count} messages, version {working.version}")

        ticket = support_ticket()
        prompt = await preview_prompt(
            memory, "memory prompt the support assistant gets for the ticket", ticket
        )
        support = Assistant(memory, name="support assistant", persona=PERSONA)
        await support.converse(ticket)
        own = await memory.search_episodes(SUPPORT, "Rotterdam route exports", top_k=10)

        heading("checks")
        checks.check(
            "deal stage after the restart is 'negotiation'",
            values.get(("deal", "stage")) == "negotiation",
        )
        checks.check(
            "deal stage history is discovery -> proposal -> negotiation",
            [v.value for v in versions] == ["discovery", "proposal"]
            and current is not None
            and current.value == "negotiation",
        )
        checks.check(
            "key contacts recalled: Priya Nair (champion) and Hank Ruiz (economic buyer)",
            "Priya Nair" in values.get(("contacts", "champion"), "")
            and "Hank Ruiz" in values.get(("contacts", "economic_buyer"), ""),
        )
        checks.check(
            "search finds the call where Hank Ruiz's sign-off came up",
            any(
                "Hank Ruiz" in h.episode.content and h.episode.scope.session_id == "call-2026-03-16"
                for h in hits
            ),
        )
        checks.check(
            "the last call's working memory survived the restart (2 messages)",
            working.message_count == 2,
        )
        checks.check(
            "the support agent's prompt carries the sales agent's deal stage and champion",
            "negotiation" in prompt.system and "Priya Nair" in prompt.system,
        )
        checks.check(
            "the ticket is stored under the support agent only",
            {h.episode.scope.agent_id for h in own} == {"support-agent"},
        )
    return checks


def main(argv: list[str] | None = None) -> int:
    return run_example(NAME, "A CRM assistant remembering a customer account.", story, argv)


if __name__ == "__main__":
    raise SystemExit(main())
