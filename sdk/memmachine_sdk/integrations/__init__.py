"""Adapters that plug memmachine into agent frameworks. Each is a thin layer over this SDK
(so it talks to a memmachine server) and an optional extra of ``memmachine-sdk``:

* ``integrations.langgraph``: ``MemMachineStore``, LangGraph long-term memory
  (a ``BaseStore`` on profile facts); extra ``langgraph``.
* ``integrations.langchain``: ``MemMachineChatMessageHistory``, a LangChain chat message
  history on a session's working memory; extra ``langchain``.
* ``integrations.openai_agents``: ``MemMachineSession``, an OpenAI Agents SDK session on
  working memory, and ``memory_tools`` / ``amemory_tools``, memmachine's ``remember``,
  ``recall`` and ``forget`` as its function tools; extra ``openai-agents``.
* ``integrations.llama_index``: ``MemMachineMemoryBlock``, a LlamaIndex ``Memory`` block
  that puts what memmachine finds for the conversation into the prompt; extra
  ``llama-index``.

Importing this package imports no framework; import the module you need.
"""
