"""A reading list as a custom memory type: books a user wants to read, is reading or has read.

Serve it with ``MEMMACHINE_MEMORY_TYPES=examples.custom_memory_type:ReadingList memmachine
serve`` (from the repository root), or register it from an installed package with an entry
point in the group ``memmachine.memory_types``. It is then served at
``/v1/memory-types/reading_list/{store,retrieve}``, by the MCP custom-memory tools and by the
SDK's ``store_custom`` / ``retrieve_custom``; memmachine itself is not changed.

One book per title (case and spacing ignored): storing a title again updates it, keeping when
it was first added. Records are per user (no ``partition_by``): every session and agent of the
user sees the same list.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from memmachine.memory_types import CustomMemoryType, CustomRecord, RecordSpace

__all__ = ["AddBook", "Book", "FindBooks", "ReadingList"]

Status = Literal["to_read", "reading", "done"]


class AddBook(BaseModel):
    """Add a book to the list, or update the one with the same title."""

    model_config = ConfigDict(extra="forbid")

    title: str = Field(min_length=1, max_length=300, pattern=r"\S")
    author: str | None = Field(default=None, max_length=200)
    status: Status = "to_read"
    note: str | None = Field(default=None, max_length=2000)


class FindBooks(BaseModel):
    """Find books: all, or those matching every filter given."""

    model_config = ConfigDict(extra="forbid")

    status: Status | None = None
    author: str | None = None
    #: Words that must all appear in the title, author or note (case ignored).
    text: str | None = None
    limit: int = Field(default=20, ge=1, le=200)


class Book(BaseModel):
    title: str
    author: str | None
    status: Status
    note: str | None
    added_at: datetime
    updated_at: datetime


class ReadingList(CustomMemoryType[AddBook, FindBooks]):
    name = "reading_list"
    description = (
        "A user's reading list: books to read, being read and read, with notes. "
        "Store adds or updates a book by title; retrieve filters by status, author or words."
    )

    async def store(self, records: RecordSpace, item: AddBook) -> Book:
        record = await records.put(_key(item.title), item)
        return _book(record)

    async def retrieve(self, records: RecordSpace, query: FindBooks) -> list[Book]:
        words = (query.text or "").lower().split()
        found: list[Book] = []
        for record in await records.records(newest_first=True):
            book = _book(record)
            if query.status is not None and book.status != query.status:
                continue
            if query.author is not None and (book.author or "").lower() != query.author.lower():
                continue
            haystack = " ".join(filter(None, (book.title, book.author, book.note))).lower()
            if not all(word in haystack for word in words):
                continue
            found.append(book)
            if len(found) == query.limit:
                break
        return found


def _key(title: str) -> str:
    return " ".join(title.lower().split())[:256]


def _book(record: CustomRecord) -> Book:
    data = AddBook.model_validate(record.data)
    return Book(
        title=data.title,
        author=data.author,
        status=data.status,
        note=data.note,
        added_at=record.created_at,
        updated_at=record.updated_at,
    )
