"""The SDK's custom memory type calls against a real server on a loopback port, serving the
example reading list registered through ``MEMMACHINE_MEMORY_TYPES``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from examples.custom_memory_type import AddBook, Book, FindBooks
from memmachine_sdk import AsyncClient, Client
from memmachine_sdk.errors import InvalidInputError, NotFoundError
from tests.sdk.conftest import live_server
from tests.server.conftest import make_settings

KEY = "types-key"


@pytest.fixture(scope="module")
def types_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    settings = make_settings(
        tmp_path_factory.mktemp("sdk-types"),
        api_keys=f"{KEY}=t1",
        memory_types=["examples.custom_memory_type:ReadingList"],
    )
    with live_server(settings) as url:
        yield url


def test_list_store_and_retrieve_with_the_blocking_client(types_url: str) -> None:
    with Client(types_url, api_key=KEY, user_id="ana") as mm:
        (listed,) = mm.memory_types()
        assert listed.name == "reading_list"
        assert listed.store_schema["required"] == ["title"]

        added = mm.store_custom("reading_list", AddBook(title="Dune", author="Frank Herbert"))
        assert Book.model_validate(added).title == "Dune"
        mm.store_custom("reading_list", {"title": "Emma", "status": "reading"})

        found = mm.retrieve_custom("reading_list", FindBooks(status="reading"))
        assert [Book.model_validate(book).title for book in found] == ["Emma"]
        everything = mm.retrieve_custom("reading_list")
        assert [book["title"] for book in everything] == ["Emma", "Dune"]
        # Another user of the same tenant has an empty list.
        assert mm.retrieve_custom("reading_list", user_id="bob") == []


def test_errors_are_typed_and_name_what_was_wrong(types_url: str) -> None:
    with Client(types_url, api_key=KEY, user_id="eve") as mm:
        with pytest.raises(NotFoundError) as unknown:
            mm.store_custom("diary", {"text": "hello"})
        assert "'diary'" in unknown.value.message

        with pytest.raises(InvalidInputError) as invalid:
            mm.store_custom("reading_list", {"title": "Dune", "status": "abandoned"})
        assert invalid.value.field == "input.status"
        assert mm.retrieve_custom("reading_list") == []

        with pytest.raises(InvalidInputError) as bad_id:
            mm.retrieve_custom("reading_list", user_id="not a valid id")
        assert bad_id.value.field == "user_id"


async def test_the_async_client_does_the_same(types_url: str) -> None:
    async with AsyncClient(types_url, api_key=KEY) as mm:
        assert [t.name for t in await mm.memory_types()] == ["reading_list"]
        await mm.store_custom("reading_list", {"title": "Ulysses"}, user_id="ola")
        found = await mm.retrieve_custom("reading_list", {"text": "ulysses"}, user_id="ola")
        assert [book["title"] for book in found] == ["Ulysses"]
        with pytest.raises(NotFoundError):
            await mm.retrieve_custom("diary", user_id="ola")
