"""OpenAILanguageModel, LlmSettings and the prompt seam against a scripted loopback server."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from memmachine.adapters.openai.openai_language_model import (
    OpenAILanguageModel,
    parse_json_reply,
    repair_json,
)
from memmachine.bootstrap import build_language_model
from memmachine.config import LLM_OFF_REASON, LlmSettings
from memmachine.errors import InvalidInputError, ModelOutputError, StoreError
from memmachine.ports import LanguageModel
from memmachine.prompting.llm import PromptMessage, Summary, summarise_messages
from tests.fakes.llm_fixtures import llm_server  # noqa: F401  (fixture)
from tests.fakes.llm_server import ChatRequest, Reply, ScriptedChatServer

API_KEY = "sk-test-0123456789-secret"


class Person(BaseModel):
    name: str
    age: int
    tags: list[str] = []
    member: bool | None = None


@pytest.fixture
async def model(llm_server: ScriptedChatServer) -> AsyncIterator[OpenAILanguageModel]:  # noqa: F811
    lm = OpenAILanguageModel(llm_server.base_url, "test-model", api_key=API_KEY, max_retries=2)
    async with lm:
        yield lm


ASK: list[dict[str, str]] = [{"role": "user", "content": "Who is Ada?"}]


# ---------------------------------------------------------------------- plain completion


async def test_complete_returns_text_and_sends_model_and_key(
    llm_server: ScriptedChatServer,  # noqa: F811
    model: OpenAILanguageModel,
) -> None:
    assert isinstance(model, LanguageModel)
    assert model.name == "llm"
    llm_server.reply("Ada Lovelace wrote the first program.")

    text = await model.complete([{"role": "system", "content": "Be brief."}, *ASK], max_tokens=20)

    assert text == "Ada Lovelace wrote the first program."
    (request,) = llm_server.requests
    assert request.path == "/v1/chat/completions"
    assert request.model == "test-model"
    assert request.authorization == f"Bearer {API_KEY}"
    assert request.messages == [{"role": "system", "content": "Be brief."}, *ASK]
    assert request.body["max_tokens"] == 20
    assert request.body["temperature"] == 0.0
    assert request.response_format is None


async def test_keyless_server_and_lazy_start(llm_server: ScriptedChatServer) -> None:  # noqa: F811
    lm = OpenAILanguageModel(llm_server.base_url + "/", "local", api_key=None)
    llm_server.reply("ok")
    assert await lm.complete(ASK) == "ok"
    await lm.close()
    await lm.close()
    with pytest.raises(StoreError, match="closed"):
        await lm.complete(ASK)


# ---------------------------------------------------------------------- structured output


async def test_structured_result_parsed_with_schema_in_system_prompt(
    llm_server: ScriptedChatServer,  # noqa: F811
    model: OpenAILanguageModel,
) -> None:
    llm_server.reply('{"name": "Ada", "age": 36, "tags": ["maths"]}')

    person = await model.complete_structured(
        [{"role": "system", "content": "You know history."}, *ASK], Person
    )

    assert person == Person(name="Ada", age=36, tags=["maths"])
    (request,) = llm_server.requests
    assert request.response_format == {"type": "json_object"}
    system = [m for m in request.messages if m["role"] == "system"]
    assert len(system) == 1  # the schema joins the caller's system message
    assert system[0]["content"].startswith("You know history.")
    assert '"age"' in system[0]["content"]
    assert "JSON schema" in system[0]["content"]
    assert request.messages[-1] == ASK[0]


async def test_fenced_json_is_extracted(
    llm_server: ScriptedChatServer,  # noqa: F811
    model: OpenAILanguageModel,
) -> None:
    llm_server.reply('Sure! Here it is:\n```json\n{"name": "Ada", "age": 36}\n```\nAnything else?')
    assert await model.complete_structured(ASK, Person) == Person(name="Ada", age=36)
    assert len(llm_server.requests) == 1


async def test_small_slips_are_repaired(
    llm_server: ScriptedChatServer,  # noqa: F811
    model: OpenAILanguageModel,
) -> None:
    llm_server.reply(
        "The answer is {'name': 'Ada', 'age': 36, 'tags': ['it\\'s \"maths\"',], "
        "'member': True,} as requested."
    )
    person = await model.complete_structured(ASK, Person)
    assert person == Person(name="Ada", age=36, tags=['it\'s "maths"'], member=True)
    assert len(llm_server.requests) == 1


async def test_invalid_then_valid_reply_retries_once_with_the_error(
    llm_server: ScriptedChatServer,  # noqa: F811
    model: OpenAILanguageModel,
) -> None:
    llm_server.reply('{"name": "Ada"}', '{"name": "Ada", "age": 36}')

    person = await model.complete_structured(ASK, Person)

    assert person == Person(name="Ada", age=36)
    first, second = llm_server.requests
    assert second.messages[: len(first.messages)] == first.messages
    assistant, correction = second.messages[len(first.messages) :]
    assert assistant == {"role": "assistant", "content": '{"name": "Ada"}'}
    assert correction["role"] == "user"
    assert "age: Field required" in correction["content"]


async def test_always_invalid_raises_model_output_error_with_raw(
    llm_server: ScriptedChatServer,  # noqa: F811
    model: OpenAILanguageModel,
) -> None:
    llm_server.default = "I am not sure who that is."

    with pytest.raises(ModelOutputError) as caught:
        await model.complete_structured(ASK, Person, retries=2)

    assert caught.value.raw == "I am not sure who that is."
    assert caught.value.store == "llm"
    assert "Person" in str(caught.value)
    assert "3 attempts" in str(caught.value)
    assert len(llm_server.requests) == 3
    assert "no JSON object" in llm_server.requests[-1].messages[-1]["content"]


async def test_zero_retries_asks_once(
    llm_server: ScriptedChatServer,  # noqa: F811
    model: OpenAILanguageModel,
) -> None:
    llm_server.reply('{"name": "Ada", "age": "old"}')
    with pytest.raises(ModelOutputError, match="age"):
        await model.complete_structured(ASK, Person, retries=0)
    assert len(llm_server.requests) == 1


async def test_server_rejecting_response_format_is_asked_without_it(
    llm_server: ScriptedChatServer,  # noqa: F811
    model: OpenAILanguageModel,
) -> None:
    llm_server.reject_response_format = True
    llm_server.reply('{"name": "Ada", "age": 36}', '{"name": "Bob", "age": 7}')

    assert await model.complete_structured(ASK, Person) == Person(name="Ada", age=36)
    assert await model.complete_structured(ASK, Person) == Person(name="Bob", age=7)

    formats = [request.response_format for request in llm_server.requests]
    assert formats == [{"type": "json_object"}, None, None]  # remembered after one refusal


# ---------------------------------------------------------------------- transport


async def test_429_then_success(
    llm_server: ScriptedChatServer,  # noqa: F811
    model: OpenAILanguageModel,
) -> None:
    llm_server.reply(Reply(status=429), "fine now")
    assert await model.complete(ASK) == "fine now"
    assert len(llm_server.requests) == 2


async def test_500_forever_raises_store_error_without_the_key(
    llm_server: ScriptedChatServer,  # noqa: F811
    model: OpenAILanguageModel,
) -> None:
    llm_server.default = Reply(status=500)  # its message echoes the Authorization header

    with pytest.raises(StoreError) as caught:
        await model.complete_structured(ASK, Person)

    assert not isinstance(caught.value, ModelOutputError)
    assert caught.value.store == "llm"
    assert "HTTP 500" in str(caught.value)
    assert API_KEY not in str(caught.value)
    assert API_KEY not in repr(caught.value.__cause__)
    assert len(llm_server.requests) == 3  # one try and max_retries=2 retries


async def test_bad_key_is_a_store_error_with_a_hint(llm_server: ScriptedChatServer) -> None:  # noqa: F811
    llm_server.api_key = "sk-the-right-one-123"
    async with OpenAILanguageModel(llm_server.base_url, "m", api_key=API_KEY) as lm:
        with pytest.raises(StoreError, match=r"HTTP 401.*MEMMACHINE_LLM_API_KEY") as caught:
            await lm.complete(ASK)
    assert API_KEY not in str(caught.value)


async def test_unreachable_and_timeout_are_store_errors(llm_server: ScriptedChatServer) -> None:  # noqa: F811
    dead = ScriptedChatServer()
    url = dead.base_url
    dead.stop()
    async with OpenAILanguageModel(url, "m", api_key=API_KEY, max_retries=0) as lm:
        with pytest.raises(StoreError, match="unreachable") as caught:
            await lm.complete(ASK)
    assert API_KEY not in str(caught.value)

    llm_server.reply(Reply(content="late", delay=1.0))
    async with OpenAILanguageModel(
        llm_server.base_url, "m", api_key=API_KEY, timeout=0.2, max_retries=0
    ) as lm:
        with pytest.raises(StoreError, match="timed out"):
            await lm.complete(ASK)


async def test_request_recording_and_callable_script(llm_server: ScriptedChatServer) -> None:  # noqa: F811
    def echo(request: ChatRequest) -> str:
        return request.last_user_content.upper()

    llm_server.reply(echo)
    async with OpenAILanguageModel(
        llm_server.base_url.removesuffix("/v1"), "m", api_key=API_KEY
    ) as lm:
        assert await lm.complete(ASK) == "WHO IS ADA?"
    assert llm_server.requests[0].path == "/chat/completions"
    assert llm_server.pending == 0


def test_constructor_rejects_nonsense() -> None:
    with pytest.raises(Exception, match="max_retries"):
        OpenAILanguageModel("http://127.0.0.1:9/v1", "m", api_key=None, max_retries=-1)
    with pytest.raises(Exception, match="model name"):
        OpenAILanguageModel("http://127.0.0.1:9/v1", "", api_key=None)


# ---------------------------------------------------------------------- JSON reading


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('  \n{"a": [1, 2]}\n', {"a": [1, 2]}),
        ('```\n{"a": 1}\n```', {"a": 1}),
        ('```JSON {"a": 1}```', {"a": 1}),
        ('Note {see below}. {"a": "}"} done', {"a": "}"}),
        ('{"a": [1, 2,], "b": {"c": 3,},}', {"a": [1, 2], "b": {"c": 3}}),
        ("{'a': 'b', 'c': None, 'd': False}", {"a": "b", "c": None, "d": False}),
        ('{"text": "True, None, and it\'s fine,}"}', {"text": "True, None, and it's fine,}"}),
        ('{"x": 1e5, "Truex": "y"}', {"x": 1e5, "Truex": "y"}),
        ("{'q': 'say \"hi\"'}", {"q": 'say "hi"'}),
    ],
)
def test_parse_json_reply(reply: str, expected: Any) -> None:
    assert parse_json_reply(reply) == expected


@pytest.mark.parametrize(
    ("reply", "message"),
    [("no braces at all", "no JSON object"), ('{"a": 1', "not valid JSON"), ("", "no JSON")],
)
def test_parse_json_reply_failures(reply: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_json_reply(reply)


def test_repair_json_leaves_valid_json_alone() -> None:
    text = json.dumps({"a": "it's, ]", "b": [True, None], "c": "None"})
    assert repair_json(text) == text


# ---------------------------------------------------------------------- settings


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("BASE_URL", "MODEL", "API_KEY"):
        monkeypatch.delenv(f"MEMMACHINE_LLM_{name}", raising=False)
        monkeypatch.delenv(f"OPENAI_{name}", raising=False)
    for name in (
        "MEMMACHINE_LLM_TIMEOUT_SECONDS",
        "MEMMACHINE_LLM_MAX_RETRIES",
        "MEMMACHINE_CONFIG",
    ):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_settings_read_memmachine_variables_first(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("MEMMACHINE_LLM_BASE_URL", "http://127.0.0.1:11434/v1")
    clean_env.setenv("MEMMACHINE_LLM_MODEL", "llama3.1:8b")
    clean_env.setenv("MEMMACHINE_LLM_MAX_RETRIES", "5")
    clean_env.setenv("OPENAI_BASE_URL", "http://elsewhere/v1")
    clean_env.setenv("OPENAI_MODEL", "gpt-4o-mini")
    clean_env.setenv("OPENAI_API_KEY", API_KEY)

    settings = LlmSettings()

    assert settings.base_url == "http://127.0.0.1:11434/v1"
    assert settings.model == "llama3.1:8b"
    # The OpenAI key is not sent to memmachine's own (non-OpenAI) base URL.
    assert settings.api_key is None
    assert settings.max_retries == 5
    assert settings.enabled
    assert API_KEY not in repr(settings)


def test_settings_fall_back_to_openai_variables(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")
    clean_env.setenv("OPENAI_MODEL", "qwen")
    settings = LlmSettings()
    assert (settings.base_url, settings.model, settings.api_key) == (
        "http://127.0.0.1:8000/v1",
        "qwen",
        None,
    )
    assert settings.enabled


@pytest.mark.parametrize(
    ("values", "enabled"),
    [
        ({}, False),
        ({"model": "m"}, False),
        ({"base_url": "http://127.0.0.1:1/v1"}, False),
        ({"api_key": "sk-x"}, False),
        ({"model": "m", "api_key": ""}, False),
        ({"model": "m", "base_url": "http://127.0.0.1:1/v1"}, True),
        ({"model": "m", "api_key": "sk-x"}, True),
    ],
)
def test_enabled_needs_a_model_and_a_way_to_reach_it(
    clean_env: pytest.MonkeyPatch, values: dict[str, Any], enabled: bool
) -> None:
    assert LlmSettings(**values).enabled is enabled


def test_settings_from_the_yaml_file(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "memmachine.yaml"
    path.write_text("llm:\n  base_url: http://127.0.0.1:4000/v1\n  model: via-litellm\n")
    clean_env.setenv("MEMMACHINE_CONFIG", str(path))
    clean_env.setenv("MEMMACHINE_LLM_MODEL", "from-env")
    settings = LlmSettings()
    assert (settings.base_url, settings.model) == ("http://127.0.0.1:4000/v1", "from-env")


def test_build_language_model_off_says_why(clean_env: pytest.MonkeyPatch) -> None:
    model, reason = build_language_model(LlmSettings())
    assert model is None
    assert reason == LLM_OFF_REASON
    assert "MEMMACHINE_LLM_MODEL" in reason
    assert "MEMMACHINE_LLM_BASE_URL" in reason


async def test_build_language_model_on_talks_to_the_server(
    clean_env: pytest.MonkeyPatch,
    llm_server: ScriptedChatServer,  # noqa: F811
) -> None:
    clean_env.setenv("MEMMACHINE_LLM_BASE_URL", llm_server.base_url)
    clean_env.setenv("MEMMACHINE_LLM_MODEL", "served")
    clean_env.setenv("MEMMACHINE_LLM_API_KEY", API_KEY)
    model, reason = build_language_model(LlmSettings())
    assert model is not None
    assert reason == ""
    llm_server.reply("hello")
    await model.start()
    try:
        assert await model.complete(ASK) == "hello"
    finally:
        await model.close()
    assert llm_server.requests[0].model == "served"
    assert llm_server.requests[0].authorization == f"Bearer {API_KEY}"


# ---------------------------------------------------------------------- the example prompt


TRANSCRIPT = [
    PromptMessage(id="m1", role="user", content="I'm moving to Lisbon in May."),
    PromptMessage(id="m2", role="assistant", content="Exciting! Need help with anything?"),
    PromptMessage(id="m3", role="user", content="Find me a 2-bedroom flat under 1500 EUR."),
]


async def test_summarise_messages_end_to_end(
    llm_server: ScriptedChatServer,  # noqa: F811
    model: OpenAILanguageModel,
) -> None:
    llm_server.reply(
        "```json\n"
        '{"text": "The user moves to Lisbon in May and wants a 2-bedroom flat under '
        '1500 EUR.", "covered_ids": ["m3", "m1", "m1", "m9"],}\n```'
    )

    summary = await summarise_messages(model, TRANSCRIPT, 40, previous_summary="User is Ana.")

    assert isinstance(summary, Summary)
    assert "Lisbon" in summary.text
    assert summary.covered_ids == ["m1", "m3"]  # known ids only, once each, in input order
    (request,) = llm_server.requests
    assert request.messages[0]["role"] == "system"
    assert "covered_ids" in request.system_content  # instructions + schema
    user = request.last_user_content
    assert "User is Ana." in user
    assert "at most 40 words" in user
    assert '"id": "m3"' in user
    assert "1500 EUR" in user


async def test_summarise_messages_rejects_empty_input(model: OpenAILanguageModel) -> None:
    with pytest.raises(InvalidInputError):
        await summarise_messages(model, [], 50)
    with pytest.raises(InvalidInputError):
        await summarise_messages(model, TRANSCRIPT, 0)
