/**
 * Retries, backoff and timeouts against a scripted loopback server: what is repeated and
 * what never is (a write that may have happened), and the typed error that ends it.
 */

import assert from "node:assert/strict";
import { createServer } from "node:net";
import { after, before, describe, test } from "node:test";

import {
  MemMachineClient,
  MemMachineConnectionError,
  MemMachineTimeoutError,
  RateLimitedError,
  RetryPolicy,
  ServerError,
  ServiceUnavailableError,
} from "../src/index.js";
import { ScriptedServer } from "./scripted.js";

const ADDED = { session_id: "s1", episode_ids: ["e1"] };
const FOUND = { episodic: [], profile: [], working: null };
const FAST = { backoffBaseMs: 1, backoffMaxMs: 5 };

let server: ScriptedServer;

function client(options: ConstructorParameters<typeof MemMachineClient>[0] = {}) {
  return new MemMachineClient({ baseUrl: server.url, apiKey: "k", retry: FAST, ...options });
}

function chat(mm: MemMachineClient) {
  return mm.memory({ userId: "ana", sessionId: "s1" });
}

before(async () => {
  server = await new ScriptedServer().start();
});

after(async () => {
  await server.stop();
});

describe("429 and 503: the server did nothing, so every request is retried", () => {
  test("a write is repeated after 429, after the Retry-After the server asked for", async () => {
    server.answer(
      { status: 429, headers: { "retry-after": "0" }, body: { error: { code: "rate_limited", message: "slow down" } } },
      { status: 201, body: ADDED },
    );
    const added = await chat(client()).add("hello");
    assert.deepEqual(added, ADDED);
    assert.equal(server.seen.length, 2);
    assert.deepEqual(server.seen[1]!.body, server.seen[0]!.body);
  });

  test("a write is repeated after 503 with backoff, and the last 503 is thrown typed", async () => {
    server.answer({ status: 503, body: { error: { code: "store_unavailable", message: "down" } } });
    await assert.rejects(chat(client()).add("hello"), (error: unknown) => {
      assert.ok(error instanceof ServiceUnavailableError);
      assert.ok(error instanceof ServerError);
      assert.equal(error.status, 503);
      assert.equal(error.code, "store_unavailable");
      return true;
    });
    assert.equal(server.seen.length, 3); // the first attempt and maxRetries (2) more
  });

  test("a Retry-After longer than the policy allows is thrown at once, with its value", async () => {
    server.answer({ status: 429, headers: { "retry-after": "120" }, body: { error: { code: "rate_limited", message: "later" } } });
    await assert.rejects(chat(client()).search("x"), (error: unknown) => {
      assert.ok(error instanceof RateLimitedError);
      assert.equal(error.retryAfter, 120);
      return true;
    });
    assert.equal(server.seen.length, 1);
  });
});

describe("502, 504, timeouts: the server may have acted, so only safe requests are retried", () => {
  test("adding memories is not repeated after a 502", async () => {
    server.answer({ status: 502, body: { error: { code: "bad_gateway", message: "proxy" } } }, { status: 201, body: ADDED });
    await assert.rejects(chat(client()).add("hello"), ServerError);
    assert.equal(server.seen.length, 1);
  });

  test("a search is repeated after a 504", async () => {
    server.answer({ status: 504 }, { status: 200, body: FOUND });
    assert.deepEqual(await chat(client()).search("dog"), FOUND);
    assert.equal(server.seen.length, 2);
  });

  test("a conditional state write is not repeated after a 502, an unconditional one is", async () => {
    const working = {
      user_id: "ana", session_id: "s1", messages: [], message_count: 0, first_index: 0,
      state: { a: 1 }, summary: null, version: 4, ttl_seconds: null, updated_at: null,
    };
    server.answer({ status: 502 }, { status: 200, body: working });
    await assert.rejects(chat(client()).state.set({ a: 1 }, { expectedVersion: 3 }), ServerError);
    assert.equal(server.seen.length, 1);
    server.answer({ status: 502 }, { status: 200, body: working });
    const state = await chat(client()).state.set({ a: 1 });
    assert.deepEqual(state, { value: { a: 1 }, version: 4, updatedAt: null });
    assert.equal(server.seen.length, 2);
  });

  test("a write that times out is not repeated, and says it may have been sent", async () => {
    server.answer({ hang: true });
    await assert.rejects(chat(client({ timeoutMs: 200 })).add("hello"), (error: unknown) => {
      assert.ok(error instanceof MemMachineTimeoutError);
      assert.ok(error instanceof MemMachineConnectionError);
      assert.equal(error.requestSent, true);
      assert.equal(error.status, null);
      return true;
    });
    assert.equal(server.seen.length, 1);
  });

  test("a read that times out is retried, then the timeout is thrown", async () => {
    server.answer({ hang: true });
    await assert.rejects(chat(client({ timeoutMs: 150 })).episodes(), MemMachineTimeoutError);
    assert.equal(server.seen.length, 3);
  });
});

describe("a connection that cannot be opened", () => {
  test("is retried even for a write (nothing was sent) and thrown as not sent", async () => {
    const closed = await new Promise<number>((resolve) => {
      const probe = createServer();
      probe.listen(0, "127.0.0.1", () => {
        const address = probe.address();
        probe.close(() => resolve(typeof address === "object" && address ? address.port : 0));
      });
    });
    let attempts = 0;
    const counting: typeof fetch = (input, init) => {
      attempts += 1;
      return fetch(input, init);
    };
    const mm = new MemMachineClient({ baseUrl: `http://127.0.0.1:${closed}`, fetch: counting, retry: FAST });
    await assert.rejects(chat(mm).add("hello"), (error: unknown) => {
      assert.ok(error instanceof MemMachineConnectionError);
      assert.equal(error.requestSent, false);
      return true;
    });
    assert.equal(attempts, 3);
  });
});

describe("the policy", () => {
  test("backoff is full jitter under an exponential ceiling", () => {
    const policy = new RetryPolicy({ backoffBaseMs: 100, backoffMaxMs: 1000 });
    assert.equal(policy.backoff(0, () => 1), 100);
    assert.equal(policy.backoff(3, () => 1), 800);
    assert.equal(policy.backoff(10, () => 1), 1000);
    assert.equal(policy.backoff(10, () => 0), 0);
  });

  test("maxRetries 0 sends once", async () => {
    server.answer({ status: 503 });
    await assert.rejects(chat(client({ retry: { maxRetries: 0 } })).search("x"), ServiceUnavailableError);
    assert.equal(server.seen.length, 1);
  });

  test("negative settings are refused", () => {
    assert.throws(() => new RetryPolicy({ maxRetries: -1 }), RangeError);
  });
});
