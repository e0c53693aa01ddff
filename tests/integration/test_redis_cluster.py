"""A manager wired by bootstrap from settings alone, with working memory and the job queue on
a three-node Redis Cluster (``redis+cluster://``): writes land on every node, each user's
keys on one, jobs run, and forgetting a user reaches the cluster."""

from __future__ import annotations

from pathlib import Path

from memmachine import open_manager
from memmachine.config import EmbeddingSettings, JobSettings, Settings
from memmachine.models import Scope, WorkingMessage, utc_now
from tests.conftest import async_redis_client, drop_redis_keys


async def test_a_manager_keeps_working_memory_and_jobs_on_a_redis_cluster(
    redis_cluster_url: str, tmp_path: Path, unique: str
) -> None:
    prefix = f"mmtest-{unique}"
    settings = Settings(
        data_dir=tmp_path,
        embedding=EmbeddingSettings(provider="none"),
        working_store_url=redis_cluster_url,
        working_key_prefix=prefix,
        jobs=JobSettings(key_prefix=prefix, in_process_worker=False),
    )
    users = [Scope(tenant=f"t{unique}", user_id=f"user{n}", session_id="s1") for n in range(12)]
    raw = async_redis_client(redis_cluster_url, decode_responses=True)
    try:
        async with open_manager(settings) as manager:
            health = await manager.health()
            for store in ("working", "jobs"):
                assert health.stores[store].status == "ok", health.stores[store]
                assert "cluster of 3 primaries" in (health.stores[store].detail or "")

            for scope in users:
                message = WorkingMessage(
                    role="user", content=f"hi from {scope.user_id}", timestamp=utc_now()
                )
                await manager.append_working(scope, [message])
            nodes: dict[str, set[int]] = {}
            async for key in raw.scan_iter(match=f"{prefix}:*"):
                user = key.split("wm:", 1)[1].split("}", 1)[0]
                nodes.setdefault(user, set()).add(raw.get_node_from_key(key).port)
            assert set(nodes) == {scope.user_id for scope in users}
            assert all(len(ports) == 1 for ports in nodes.values())  # a user stays together
            assert len(set().union(*nodes.values())) > 1  # users spread over the nodes

            assert manager.jobs is not None
            job = await manager.enqueue_compaction(users[0])
            claimed = await manager.jobs.claim("w1")
            assert claimed is not None
            assert claimed.id == job.id
            done = await manager.jobs.complete(job.id, "w1")
            assert done.status == "done"
            assert await manager.jobs.get(users[0], job.id) == done

            report = await manager.forget_user(users[0])
            assert report.sessions_deleted == 1
            assert (await manager.get_working(users[0])).version == 0
            kept = await manager.get_working(users[1])
            assert [m.content for m in kept.messages] == ["hi from user1"]
    finally:
        await raw.aclose()
        drop_redis_keys(redis_cluster_url, f"{prefix}:*")
        drop_redis_keys(redis_cluster_url, f"{{{prefix}:jobs}}:*")
