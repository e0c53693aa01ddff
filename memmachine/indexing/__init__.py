"""How episodes and facts are indexed for search, shared by the stores and by retrieval.

* :mod:`~memmachine.indexing.terms`: the one text analyser (words, stems, BM25 constants) that
  every store's full-text index and every query go through;
* :mod:`~memmachine.indexing.fusion`: fusing ranked lists (reciprocal rank, min-max scores);
* :mod:`~memmachine.indexing.scope_index`: one user's vectors and postings held in memory.

It depends on models only, so adapters and retrieval can both build on it.
"""
