"""The README's quick tour, in Chinese and Russian as in English: `memmachine serve` with no
setting at all (no model hub in reach, as here) answers a question in other words than the
memory's, in the user's own language, and says it searches by meaning."""

# Chinese and Russian text is this module's subject: its letters are meant, not confusables.
# ruff: noqa: RUF001

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.test_restart import free_port

#: Per user: the README's message first, then two that answer other questions; the question
#: the README asks, in other words than the message's.
TOUR = {
    "ana": (
        [
            "I adopted a beagle called Toast",
            "I drink black coffee every morning",
            "My sister is a teacher in Lyon",
        ],
        "what dog does she have?",
    ),
    "li": (
        ["我养了一只叫豆豆的柯基犬", "我每天早上喝一杯黑咖啡", "我姐姐在里昂当老师"],
        "她的狗叫什么名字？",
    ),
    "olga": (
        [
            "Я взяла из приюта щенка бигля по кличке Тост",
            "Каждое утро я пью чёрный кофе",
            "Моя сестра работает учительницей в Лионе",
        ],
        "Какая у неё собака?",
    ),
}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMMACHINE_")}
    env["MEMMACHINE_DATA_DIR"] = str(tmp_path / "data")
    # no hub: a default that needs one shows here as lexical-only search
    env["HF_HUB_OFFLINE"] = "1"
    env["MEMMACHINE_EMBEDDING_HUB_URL"] = "http://127.0.0.1:9"
    port = free_port()
    log = tmp_path / "server.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "memmachine_server.cli", "serve", "--port", str(port)],
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if process.poll() is not None:
                raise AssertionError(f"server exited early:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"server did not come up:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_the_quick_tour_works_in_chinese_and_russian(server: str) -> None:
    health = httpx.get(server + "/health", timeout=10).json()
    assert health["mode"] == "hybrid", health["embedder"]
    for user, (messages, question) in TOUR.items():
        for i, content in enumerate(messages):
            added = httpx.post(
                server + "/v1/memories",
                json={
                    "user_id": user,
                    "session_id": f"s{i}",
                    "messages": [{"role": "user", "producer": user, "content": content}],
                },
                timeout=30,
            )
            assert added.status_code == 201, added.text
        found = httpx.post(
            server + "/v1/memories/search",
            json={"user_id": user, "query": question, "top_k": 5},
            timeout=30,
        )
        assert found.status_code == 200, found.text
        hits = found.json()["episodic"]
        assert hits, (user, found.json())
        assert hits[0]["content"] == messages[0], (user, [hit["content"] for hit in hits])
    fact = {"tag": "宠物", "feature": "狗", "value": "柯基犬，名叫豆豆"}
    stored = httpx.post(server + "/v1/profile", json={"user_id": "li", "facts": [fact]}, timeout=30)
    assert stored.status_code in (200, 201), stored.text
    listed = httpx.get(server + "/v1/profile", params={"user_id": "li"}, timeout=30).json()
    assert [f["value"] for f in listed["facts"]] == ["柯基犬，名叫豆豆"]
