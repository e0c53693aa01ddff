/**
 * The client against a live memmachine server: `MEMMACHINE_URL` and `MEMMACHINE_API_KEY`
 * (`MEMMACHINE_OTHER_API_KEY`: a key of another tenant). The pytest test
 * tests/sdk/test_typescript_client.py starts `memmachine serve` and runs this with them.
 */

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { before, describe, test } from "node:test";

import {
  ConflictError,
  InvalidInputError,
  MemMachineClient,
  NotFoundError,
  UnauthorizedError,
} from "../src/index.js";

const URL = process.env.MEMMACHINE_URL;
const KEY = process.env.MEMMACHINE_API_KEY;
const OTHER_KEY = process.env.MEMMACHINE_OTHER_API_KEY;

function unique(prefix: string): string {
  return `${prefix}-${randomUUID().slice(0, 8)}`;
}

before(() => {
  if (!URL || !KEY || !OTHER_KEY) {
    throw new Error(
      "set MEMMACHINE_URL, MEMMACHINE_API_KEY and MEMMACHINE_OTHER_API_KEY to a running " +
        "server (uv run pytest tests/sdk/test_typescript_client.py starts one and runs this)",
    );
  }
});

describe("a scoped handle against a live server", () => {
  test("configured from the environment, it reads the server's health", async () => {
    const mm = new MemMachineClient();
    assert.equal(mm.baseUrl, URL);
    const health = await mm.health();
    assert.equal(health.status, "ok");
    for (const store of ["episodic", "profile", "working"]) {
      assert.equal(health.stores[store]?.status, "ok", store);
    }
  });

  test("a message with its timestamp sent again is answered as already stored", async () => {
    const chat = new MemMachineClient().memory({ userId: unique("ray"), sessionId: "move" });
    const said = { content: "We moved to Lisbon", timestamp: "2024-05-01T10:00:00Z" };
    const first = await chat.add([said]);
    assert.deepEqual(first.repeated_ids, []);
    const again = await chat.add([said, { ...said, content: "with the cat" }]);
    assert.equal(again.episode_ids[0], first.episode_ids[0]);
    assert.deepEqual(again.repeated_ids, first.episode_ids);
  });

  test("add, search, profile, state, prompt and forget, the way an agent uses them", async () => {
    const mm = new MemMachineClient();
    const chat = mm.memory({ userId: unique("ana"), sessionId: "vet", agentId: "assistant" });
    const added = await chat.add([
      "My beagle Toast has a vet appointment on Thursday",
      { role: "assistant", content: "I will remind you on Wednesday evening" },
    ]);
    assert.equal(added.session_id, "vet");
    assert.equal(added.episode_ids.length, 2);
    assert.deepEqual(added.repeated_ids, []);

    const found = await chat.search("when does the dog see the vet?", { topK: 3 });
    assert.equal(found.episodic[0]?.content, "My beagle Toast has a vet appointment on Thursday");
    assert.equal(found.episodic[0]?.agent_id, "assistant");
    assert.equal(found.working?.message_count, 2);

    const facts = await chat.profile.set({ tag: "pets", feature: "dog", value: "beagle named Toast" });
    assert.equal(facts[0]?.source_session_id, "vet");
    assert.deepEqual(
      (await chat.profile.get({ tag: "pets" })).map((fact) => fact.value),
      ["beagle named Toast"],
    );
    assert.equal((await chat.profile.search("what pet does she have"))[0]?.feature, "dog");
    await chat.profile.set({ tag: "pets", feature: "dog", value: "beagle named Toast, 3 years old" });
    const history = await chat.profile.history("pets", "dog");
    assert.equal(history.current?.value, "beagle named Toast, 3 years old");
    assert.deepEqual(history.history.map((version) => version.value), ["beagle named Toast"]);

    const before = await chat.state.get();
    assert.deepEqual(before.value, {});
    const state = await chat.state.set({ reminder: "Wednesday 19:00" }, { expectedVersion: before.version });
    assert.equal(state.version, before.version + 1);
    await assert.rejects(chat.state.set({ reminder: "never" }, { expectedVersion: before.version }), (error: unknown) => {
      assert.ok(error instanceof ConflictError);
      assert.equal(error.status, 409);
      assert.equal(error.currentVersion, state.version);
      return true;
    });
    assert.deepEqual((await chat.state.get()).value, { reminder: "Wednesday 19:00" });

    const prompt = await chat.prompt("What is my dog called?", { maxTokens: 1000 });
    assert.match(prompt.system, /beagle named Toast/);
    assert.deepEqual(prompt.messages.at(-1), { role: "user", content: "What is my dog called?" });
    const gemini = await chat.prompt("What is my dog called?", { format: "gemini" });
    assert.equal(gemini.format, "gemini");

    const report = await chat.forget();
    assert.deepEqual(
      [report.episodes_deleted, report.sessions_deleted, report.facts_deleted],
      [2, 1, 1],
    );
    assert.deepEqual((await chat.search("vet appointment")).episodic, []);
  });

  test("forget without a session removes everything of the user", async () => {
    const mm = new MemMachineClient({ userId: unique("ben") });
    await mm.memory({ sessionId: "garden" }).add("The tomatoes go in the south bed");
    await mm.memory({ sessionId: "kitchen" }).add("Basil on the window sill");
    const user = mm.memory();
    assert.equal((await user.episodes()).total, 2);
    const report = await user.forget();
    assert.deepEqual([report.episodes_deleted, report.sessions_deleted], [2, 2]);
    assert.equal((await user.episodes()).total, 0);
  });

  test("episodes page through the session, newest first on request", async () => {
    const chat = new MemMachineClient().memory({ userId: unique("cy"), sessionId: "s" });
    await chat.add(["one", "two", "three"]);
    const page = await chat.episodes({ limit: 2, newestFirst: true });
    assert.deepEqual(page.episodes.map((episode) => episode.content), ["three", "two"]);
    assert.equal(page.total, 3);
  });

  test("every operation is reachable, typed, by its operationId", async () => {
    const mm = new MemMachineClient();
    const tools = await mm.request("list_tools");
    assert.deepEqual(
      tools.tools.map((tool) => (tool.function as { name: string }).name).sort(),
      ["forget", "recall", "remember"],
    );
    const user = unique("dee");
    await mm.request("append_working", {
      path: { session_id: "s" },
      body: { user_id: user, messages: [{ content: "hello" }] },
    });
    const working = await mm.request("get_working", {
      path: { session_id: "s" },
      query: { user_id: user },
    });
    assert.equal(working.messages[0]?.content, "hello");
    const deleted = await mm.request("delete_working", {
      path: { session_id: "s" },
      query: { user_id: user },
    });
    assert.equal(deleted, undefined); // 204
  });
});

describe("errors from a live server", () => {
  test("a wrong key is UnauthorizedError", async () => {
    const mm = new MemMachineClient({ apiKey: "not-a-key" });
    await assert.rejects(mm.memory({ userId: "ana" }).search("anything"), (error: unknown) => {
      assert.ok(error instanceof UnauthorizedError);
      assert.equal(error.status, 401);
      assert.equal(error.code, "unauthenticated");
      return true;
    });
  });

  test("input the server refuses is InvalidInputError naming the field", async () => {
    const chat = new MemMachineClient().memory({ userId: unique("eve"), sessionId: "s" });
    await assert.rejects(chat.search("dog", { topK: 0 }), (error: unknown) => {
      assert.ok(error instanceof InvalidInputError);
      assert.equal(error.field, "top_k");
      return true;
    });
    await assert.rejects(chat.add({ content: "x", role: "robot" as "user" }), {
      name: "InvalidInputError",
      field: "messages.0.role",
    });
  });

  test("an unknown fact is NotFoundError", async () => {
    const chat = new MemMachineClient().memory({ userId: unique("fay") });
    await assert.rejects(chat.profile.deleteFact("no-such-fact"), NotFoundError);
  });

  test("another tenant's key sees nothing of the same user id", async () => {
    const user = unique("gus");
    await new MemMachineClient().memory({ userId: user, sessionId: "s" }).add("the vault code is 1234");
    const other = new MemMachineClient({ apiKey: OTHER_KEY }).memory({ userId: user });
    assert.deepEqual((await other.search("vault code")).episodic, []);
    assert.equal((await other.episodes()).total, 0);
  });
});
