"""A LangChain chat whose history is memmachine working memory.

    uv run python -m examples.langchain_history

Each turn opens ``MemMachineChatMessageHistory`` (``memmachine-sdk[langchain]``) for the
user's session, as a web handler would on every request, puts the history into the prompt,
asks the model and appends the turn. The model is a stand-in so the example runs offline: a
function (LangChain's ``RunnableLambda``) that answers from what the prompt's history says.
Any real chat model fits in its place. The session lives in memmachine, so a new history
object, process or worker continues it; another user's session is separate.
"""

from __future__ import annotations

import re

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.prompt_values import PromptValue
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import RunnableLambda

from examples._common import Checks, heading
from examples._server import run_with_client
from memmachine_sdk import Client
from memmachine_sdk.integrations.langchain import MemMachineChatMessageHistory

NAME = "langchain_history"
PROMPT = ChatPromptTemplate.from_messages(
    [
        ("system", "You are a travel assistant."),
        MessagesPlaceholder("history"),
        ("human", "{question}"),
    ]
)


def scripted_model(prompt: PromptValue) -> AIMessage:
    """Stands in for a chat model: answers "where do I live?" from the earlier turns."""
    *earlier, question = prompt.to_messages()
    if "where do i live" not in str(question.content).lower():
        return AIMessage("Nice to meet you! How can I help?")
    for message in earlier:
        said = re.search(r"I live in (\w+)", str(message.content))
        if isinstance(message, HumanMessage) and said:
            return AIMessage(f"You told me you live in {said[1]}.")
    return AIMessage("You haven't told me where you live yet.")


def chat_across_requests(mm: Client) -> Checks:
    checks = Checks(NAME)
    chain = PROMPT | RunnableLambda(scripted_model)

    def turn(user: str, session: str, question: str) -> tuple[list[BaseMessage], str]:
        # What a request handler does: open the session's history, answer, append.
        history = MemMachineChatMessageHistory(session, user_id=user, client=mm)
        past = history.messages
        reply = chain.invoke({"history": past, "question": question})
        history.add_messages([HumanMessage(question), reply])
        print(f"  [{session}] {user}: {question}  ({len(past)} earlier messages)")
        print(f"  [{session}] assistant: {reply.content}")
        return past, str(reply.content)

    heading("Ana's session, first request")
    turn("ana", "trip-42", "Hi! I live in Porto and want to visit Lisbon.")
    heading("Ana's session, a later request (a new history object)")
    past, answer = turn("ana", "trip-42", "Where do I live?")
    heading("Ben's session")
    ben_past, ben_answer = turn("ben", "trip-7", "Where do I live?")

    heading("the session in memmachine (GET /v1/sessions/trip-42/working)")
    working = mm.get_working("trip-42", user_id="ana")
    for message in working.messages:
        print(f"  {message.role}: {message.content}")

    heading("checks")
    checks.check("the later request loaded the first turn", len(past) == 2)
    checks.check("the answer comes from the history", answer == "You told me you live in Porto.")
    checks.check("Ben's session has none of Ana's", ben_past == [] and "Porto" not in ben_answer)
    checks.check(
        "working memory holds the whole conversation, in order",
        [m.role for m in working.messages] == ["user", "assistant", "user", "assistant"],
    )
    return checks


def main() -> int:
    return run_with_client(NAME, chat_across_requests)


if __name__ == "__main__":
    raise SystemExit(main())
