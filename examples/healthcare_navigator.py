"""A care navigator: one patient's history shared by the agents of different departments.

    uv run python -m examples.healthcare_navigator [--data-dir DIR] [--keep]

The cardiology department's agent records that Ines has atrial fibrillation, takes the
anticoagulant apixaban and is allergic to penicillin. Two weeks later the orthopedics agent
sees her for knee pain: before the doctor's ibuprofen idea goes anywhere, its memory prompt
already holds cardiology's notes, and its reply flags the bleeding risk. After a restart a
third department, the pharmacy, answers a request for a painkiller from the whole record.

Scopes. ``user_id`` is the patient (``patient-ines``) in org ``riverside-health`` / project
``care``. Each department is an agent (``agent_id``: ``cardiology-agent``,
``orthopedics-agent``, ``pharmacy-agent``) and every visit is a session; all of them write
with ``group_id="care-team"``. A department reads the shared history with the care-team
scope (patient + group, no agent), and its own notes alone with its ``agent_id``: the
example shows both views. Profile facts (conditions, medications, allergies) belong to the
patient, whichever department recorded them. PII redaction (on by default) masks emails,
phone numbers and ids before anything is stored. A demonstration, not medical advice.
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
    recall_search,
    reopen_memory,
    run_example,
)
from memmachine import Settings
from memmachine.models import Scope

__all__ = ["main", "story"]

NAME = "healthcare_navigator"
PATIENT = Scope(org_id="riverside-health", project_id="care", user_id="patient-ines")
CARE_TEAM = PATIENT.model_copy(update={"group_id": "care-team"})
PERSONA = (
    "You are a care navigator assistant for one hospital department. Using the patient's "
    "record from every department, answer the clinician in two sentences and flag any "
    "interaction or allergy."
)


def department(agent_id: str, session_id: str) -> Scope:
    """Where a department's visit is written: the care team, that agent, that visit."""
    return CARE_TEAM.model_copy(update={"agent_id": agent_id, "session_id": session_id})


def visits() -> list[Session]:
    """Cardiology first, orthopedics two weeks later."""
    return [
        Session(
            scope=department("cardiology-agent", "cardiology-2026-02-03"),
            memory_scope=CARE_TEAM,
            speaker="Dr. Osei (cardiology)",
            began=datetime(2026, 2, 3, 8, 30, tzinfo=UTC),
            turns=(
                Say(
                    "Ines Duarte, 67, has atrial fibrillation. I started her on apixaban, "
                    "5 mg twice daily.",
                    "Recorded for the care team: atrial fibrillation "
                    "({conditions/atrial_fibrillation}); "
                    "apixaban {medications/apixaban}.",
                    facts=(
                        ("conditions", "atrial_fibrillation", "diagnosed by cardiology"),
                        ("medications", "apixaban", "5 mg twice daily, anticoagulant"),
                    ),
                ),
                Say(
                    "She is allergic to penicillin; it gave her hives.",
                    "Allergy recorded: penicillin ({allergies/penicillin}).",
                    facts=(("allergies", "penicillin", "hives"),),
                ),
            ),
        ),
        Session(
            scope=department("orthopedics-agent", "orthopedics-2026-02-17"),
            memory_scope=CARE_TEAM,
            speaker="Dr. Lindqvist (orthopedics)",
            began=datetime(2026, 2, 17, 11, 0, tzinfo=UTC),
            turns=(
                Say(
                    "Osteoarthritis of the right knee. I was going to suggest ibuprofen for "
                    "the pain; anything from cardiology against it?",
                    "Careful: cardiology has her on apixaban ({medications/apixaban}); "
                    "ibuprofen adds bleeding risk on an anticoagulant. Paracetamol is the "
                    "usual alternative.",
                    facts=(("conditions", "knee_osteoarthritis", "right knee"),),
                ),
                Say(
                    "Agreed: paracetamol, 1 g up to three times a day, and physiotherapy "
                    "twice a week.",
                    "Care plan updated: paracetamol {medications/paracetamol}; "
                    "physiotherapy {care_plan/physiotherapy}.",
                    facts=(
                        ("medications", "paracetamol", "1 g up to three times a day"),
                        ("care_plan", "physiotherapy", "twice a week for the right knee"),
                    ),
                ),
            ),
        ),
    ]


def pharmacy_request() -> Session:
    """After the restart: a third department reading the whole record."""
    return Session(
        scope=department("pharmacy-agent", "pharmacy-2026-03-01"),
        memory_scope=CARE_TEAM,
        speaker="Pharmacist Adeyemi",
        turns=(
            Say(
                "Ines asks for something over the counter for a headache.",
                "Avoid NSAIDs such as ibuprofen: she takes apixaban "
                "({medications/apixaban}). She already has paracetamol "
                "({medications/paracetamol}); stay within that dose. Allergy on file: "
                "penicillin ({allergies/penicillin}).",
            ),
        ),
    )


async def story(settings: Settings) -> Checks:
    async with open_memory(settings) as memory:
        cardiology_visit, orthopedics_visit = visits()
        cardiology = Assistant(memory, name="cardiology navigator", persona=PERSONA)
        cardiology_ids = {episode.id for episode in await cardiology.converse(cardiology_visit)}
        orthopedics = Assistant(memory, name="orthopedics navigator", persona=PERSONA)
        await orthopedics.converse(orthopedics_visit)
        # What orthopedics' first reply was built on.
        first_prompt = orthopedics.replies[0].prompt

    checks = Checks(NAME)
    async with reopen_memory(settings) as memory:
        facts = await recall_facts(memory, "the patient's record (profile facts)", PATIENT)

        query = "anticoagulant bleeding risk with painkillers"
        shared = await recall_search(memory, "care-team search", CARE_TEAM, query, top_k=4)
        orthopedics_only = CARE_TEAM.model_copy(update={"agent_id": "orthopedics-agent"})
        own = await recall_search(
            memory,
            "orthopedics' own notes only (agent_id=orthopedics-agent)",
            orthopedics_only,
            query,
            top_k=10,
        )

        request = pharmacy_request()
        prompt = await preview_prompt(memory, "memory prompt the pharmacy agent gets", request)
        pharmacy = Assistant(memory, name="pharmacy navigator", persona=PERSONA)
        await pharmacy.converse(request)

        heading("checks")
        values = {(f.tag, f.feature): f.value for f in facts}
        checks.check(
            "after the restart the record has apixaban, the penicillin allergy and both conditions",
            values.get(("medications", "apixaban")) == "5 mg twice daily, anticoagulant"
            and values.get(("allergies", "penicillin")) == "hives"
            and {("conditions", "atrial_fibrillation"), ("conditions", "knee_osteoarthritis")}
            <= values.keys(),
        )
        checks.check(
            "orthopedics' first prompt already held cardiology's notes (shared across agents)",
            bool(cardiology_ids & set(first_prompt.episode_ids))
            and "apixaban" in first_prompt.system,
        )
        checks.check(
            "the care-team search returns notes from both departments",
            {h.episode.scope.agent_id for h in shared} >= {"cardiology-agent", "orthopedics-agent"},
        )
        checks.check(
            "orthopedics' own view holds none of cardiology's notes",
            bool(own) and {h.episode.scope.agent_id for h in own} == {"orthopedics-agent"},
        )
        checks.check(
            "the pharmacy agent's prompt carries apixaban, penicillin and paracetamol",
            all(word in prompt.system for word in ("apixaban", "penicillin", "paracetamol")),
        )
    return checks


def main(argv: list[str] | None = None) -> int:
    return run_example(
        NAME, "Departments sharing one patient's history through memory.", story, argv
    )


if __name__ == "__main__":
    raise SystemExit(main())
