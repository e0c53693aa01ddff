"""An example custom memory type: a reading list (see ``reading_list.py`` and README.md)."""

from __future__ import annotations

from examples.custom_memory_type.reading_list import AddBook, Book, FindBooks, ReadingList

__all__ = ["AddBook", "Book", "FindBooks", "ReadingList"]
