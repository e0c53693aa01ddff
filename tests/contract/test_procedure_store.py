"""Contract suite of :class:`memmachine.ports.procedures.ProcedureStore`, run against every
adapter: SQLite, PostgreSQL with pgvector and PostgreSQL without it (the same databases as
the profile store's suite). Every test works under tenants that start with its own
``unique`` token, so a shared server database works as well as a temporary SQLite file."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import delete
from sqlalchemy.ext.asyncio import create_async_engine

from memmachine.adapters.sql.sql_models import (
    ProcedureHistoryRow,
    ProcedureRow,
    SessionOutcomeRow,
)
from memmachine.adapters.sql.sql_procedure_store import SqlProcedureStore
from memmachine.errors import NotFoundError
from memmachine.models import Scope
from memmachine.ports.procedures import (
    AppScope,
    ProcedureRecord,
    ProcedureSource,
    ProcedureStore,
)
from tests.contract.test_profile_store import (  # noqa: F401  (the URL fixtures)
    postgresql_plain_profile_url,
    postgresql_profile_url,
    sqlite_profile_url,
)

URLS = [
    pytest.param("sqlite_profile_url", id="sqlite"),
    pytest.param("postgresql_profile_url", id="postgresql"),
    pytest.param("postgresql_plain_profile_url", id="postgresql-plain"),
]


@pytest.fixture(params=URLS)
async def store(request: pytest.FixtureRequest, unique: str) -> AsyncIterator[ProcedureStore]:
    url = str(request.getfixturevalue(request.param))
    opened = SqlProcedureStore(url)
    await opened.start()
    try:
        yield opened
    finally:
        await opened.close()
        if not url.startswith("sqlite"):
            engine = create_async_engine(url)
            try:
                async with engine.begin() as conn:
                    for table in (ProcedureRow, ProcedureHistoryRow, SessionOutcomeRow):
                        await conn.execute(delete(table).where(table.tenant.like(f"t{unique}%")))
            finally:
                await engine.dispose()


def _app(unique: str, tenant: str = "a", agent: str | None = None) -> AppScope:
    return AppScope(tenant=f"t{unique}{tenant}", org_id="o", project_id="p", agent_id=agent)


def _record(goal: str, *steps: str, **fields: object) -> ProcedureRecord:
    return ProcedureRecord.model_validate({"goal": goal, "steps": list(steps), **fields})


def _source(user: str, session: str) -> ProcedureSource:
    return ProcedureSource(user_id=user, session_id=session)


async def test_save_get_list_and_scope(store: ProcedureStore, unique: str) -> None:
    app = _app(unique)
    saved = await store.save(
        app,
        _record(
            "Reset a password",
            "Send a link",
            pitfalls=["Links expire"],
            sources=[_source("u1", "s1"), _source("u1", "s1")],
            metadata={"k": "v"},
        ),
    )
    assert (saved.version, saved.successes, saved.failures) == (1, 0, 0)
    assert saved.sources == [_source("u1", "s1")]
    assert await store.get(app, saved.id) == saved
    assert [p.id for p in await store.list_procedures(app)] == [saved.id]
    # Another tenant, org or project sees nothing, even with the id.
    for other in (
        _app(unique, "b"),
        app.model_copy(update={"org_id": "o2"}),
        app.model_copy(update={"project_id": "p2"}),
    ):
        assert await store.get(other, saved.id) is None
        assert await store.list_procedures(other) == []
        assert await store.search(other, "reset password", None, 5) == []
        assert await store.history(other, saved.id) == []
        assert not await store.delete(other, saved.id)
        assert (
            await store.record_use(other, saved.id, success=True, confidence=lambda c: 1.0) is None
        )


async def test_agents_see_their_own_and_shared_procedures(
    store: ProcedureStore, unique: str
) -> None:
    shared = await store.save(_app(unique), _record("Shared goal", "step"))
    mine = await store.save(_app(unique, agent="bot1"), _record("Bot one goal", "step"))
    theirs = await store.save(_app(unique, agent="bot2"), _record("Bot two goal", "step"))
    seen = {p.id for p in await store.list_procedures(_app(unique, agent="bot1"))}
    assert seen == {shared.id, mine.id}
    everything = {p.id for p in await store.list_procedures(_app(unique))}
    assert everything == {shared.id, mine.id, theirs.id}
    assert await store.get(_app(unique, agent="bot1"), theirs.id) is None
    assert (await store.by_goal(_app(unique, agent="bot1"), "  bot ONE goal ")) == mine
    assert await store.by_goal(_app(unique, agent="bot1"), "Shared goal") is None
    assert await store.by_goal(_app(unique), "shared   goal") == shared


async def test_superseding_keeps_the_history(store: ProcedureStore, unique: str) -> None:
    app = _app(unique)
    first = await store.save(
        app, _record("Refund", "Check", confidence=0.5, sources=[_source("u1", "s1")])
    )
    used = await store.record_use(app, first.id, success=True, confidence=lambda c: c + 0.1)
    assert used is not None
    assert used.successes == 1
    second = await store.save(
        app,
        _record("Refund", "Check", "Refund", confidence=0.8, sources=[_source("u2", "s2")]),
        replaces=first.id,
        reason="better",
    )
    assert second.id == first.id
    assert second.created_at == first.created_at
    assert (second.version, second.successes, second.confidence) == (2, 0, 0.8)
    assert second.sources == [_source("u1", "s1"), _source("u2", "s2")]
    [old] = await store.history(app, first.id)
    assert (old.steps, old.reason, old.successes) == (["Check"], "better", 1)
    assert old.confidence == pytest.approx(0.6)
    assert old.valid_to >= old.valid_from
    with pytest.raises(NotFoundError):
        await store.save(app, _record("x", "y"), replaces="no-such-id")
    assert len(await store.list_procedures(app)) == 1
    assert await store.delete(app, first.id)
    assert await store.history(app, first.id) == []
    assert await store.get(app, first.id) is None


async def test_uses_and_corroboration(store: ProcedureStore, unique: str) -> None:
    app = _app(unique)
    saved = await store.save(app, _record("Goal", "step", confidence=0.5))
    failed = await store.record_use(app, saved.id, success=False, confidence=lambda c: c / 2)
    assert failed is not None
    assert (failed.failures, failed.confidence) == (1, 0.25)
    # Concurrent uses are each counted.
    await asyncio.gather(
        *(store.record_use(app, saved.id, success=True, confidence=lambda c: c) for _ in range(5))
    )
    counted = await store.get(app, saved.id)
    assert counted is not None
    assert counted.successes == 5
    more = await store.add_sources(app, saved.id, [_source("u1", "s1")], confidence=lambda c: 0.9)
    assert more is not None
    assert more.sources == [_source("u1", "s1")]
    assert (more.confidence, more.version) == (0.9, 1)
    assert await store.add_sources(app, "nope", [], confidence=lambda c: c) is None


async def test_search_ranks_by_text_and_meaning(store: ProcedureStore, unique: str) -> None:
    app = _app(unique)
    password = await store.save(
        app, _record("Reset a forgotten password", "Send a reset link", embedding=[1.0, 0.0])
    )
    refund = await store.save(
        app, _record("Refund a duplicate charge", "Refund the later one", embedding=[0.0, 1.0])
    )
    [(best, score), *_] = await store.search(app, "user forgot the password", None, 5)
    assert best.id == password.id
    assert 0 < score <= 1
    by_meaning = await store.search(app, "zzz", [0.1, 0.9], 5)
    assert by_meaning[0][0].id == refund.id
    assert await store.search(app, "", None, 5) == []
    assert len(await store.search(app, "refund password", [0.5, 0.5], 1)) == 1


async def test_search_reads_chinese_and_russian_procedures(
    store: ProcedureStore, unique: str
) -> None:
    """A procedure written in Chinese or Russian is found by the words a user types for it."""
    app = _app(unique)
    reset = await store.save(app, _record("重置忘记的密码", "发送重置链接到邮箱"))
    refund = await store.save(app, _record("Вернуть деньги за двойной платёж", "Отменить второй"))
    english = await store.save(app, _record("Reset a forgotten password", "Send a reset link"))
    [(best, _), *_] = await store.search(app, "用户忘了密码", None, 5)
    assert best.id == reset.id
    [(best, _), *_] = await store.search(app, "возврат денег за платежи", None, 5)
    assert best.id == refund.id
    [(best, _), *_] = await store.search(app, "user forgot the password", None, 5)
    assert best.id == english.id


async def test_search_finds_chinese_russian_and_mixed_procedures(
    store: ProcedureStore, unique: str
) -> None:
    app = _app(unique)
    zh = await store.save(app, _record("重置忘记的密码", "给用户发送重置链接", "检查Outlook邮箱"))
    ru = await store.save(app, _record("Вернуть двойной платёж", "Отменить второй платёж в Stripe"))
    en = await store.save(app, _record("Reset a forgotten password", "Send a reset link"))
    for query, expected in [
        ("密码重置", zh.id),  # Chinese words typed without spaces
        ("Outlook", zh.id),  # the English part of a Chinese step
        ("платежа", ru.id),  # Russian in another grammatical case
        ("stripe", ru.id),  # a Latin name inside Russian
        ("resetting passwords", en.id),
    ]:
        [(best, score), *_] = await store.search(app, query, None, 5)
        assert best.id == expected, query
        assert 0 < score <= 1


async def test_detaching_a_user_and_outcomes(store: ProcedureStore, unique: str) -> None:
    app = _app(unique)
    user = Scope(tenant=app.tenant, org_id="o", project_id="p", user_id="u1")
    first = await store.save(app, _record("G", "s", sources=[_source("u1", "s1")]))
    await store.save(
        app,
        _record("G", "s2", sources=[_source("u1", "s2"), _source("u2", "s3")]),
        replaces=first.id,
    )
    assert await store.set_outcome(user.for_session("s1"), "failure")
    again = await store.set_outcome(user.for_session("s1"), "success")
    assert (await store.get_outcome(user.for_session("s1"))) == again
    assert await store.get_outcome(user.for_session("s9")) is None
    other_project = Scope(tenant=app.tenant, org_id="o", project_id="p2", user_id="u1")
    assert await store.get_outcome(other_project.for_session("s1")) is None

    assert await store.detach_user(user.for_session("s2")) == 1
    current = await store.get(app, first.id)
    assert current is not None
    assert [s.session_id for s in current.sources] == ["s1", "s3"]
    assert await store.get_outcome(user.for_session("s1")) is not None

    assert await store.detach_user(user) == 1
    current = await store.get(app, first.id)
    assert current is not None
    assert current.sources == [_source("u2", "s3")]
    [old] = await store.history(app, first.id)
    assert old.sources == []
    assert await store.get_outcome(user.for_session("s1")) is None
