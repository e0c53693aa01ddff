"""Work off the hot path: compaction of working memory
(:mod:`~memmachine.pipeline.compaction`), profile extraction
(:mod:`~memmachine.pipeline.extraction`) and the worker that runs queued jobs
(:mod:`~memmachine.pipeline.worker`). Each reads and writes through a protocol that the
manager satisfies, so nothing here depends on the services it serves."""
