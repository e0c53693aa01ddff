/** The error tree: each status its class, and what the error body says carried over. */

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  BadRequestError,
  ConflictError,
  errorFor,
  InvalidInputError,
  MemMachineAPIError,
  MemMachineClient,
  MemMachineError,
  NotFoundError,
  PayloadTooLargeError,
  parseRetryAfter,
  PermissionDeniedError,
  RateLimitedError,
  ServerError,
  ServiceUnavailableError,
  UnauthorizedError,
} from "../src/index.js";

test("each status maps to its class, under MemMachineAPIError", () => {
  const cases: [number, abstract new (...args: never[]) => MemMachineAPIError][] = [
    [400, BadRequestError],
    [401, UnauthorizedError],
    [403, PermissionDeniedError],
    [404, NotFoundError],
    [409, ConflictError],
    [413, PayloadTooLargeError],
    [422, InvalidInputError],
    [429, RateLimitedError],
    [500, ServerError],
    [503, ServiceUnavailableError],
    [418, MemMachineAPIError],
  ];
  for (const [status, kind] of cases) {
    const error = errorFor(status, { error: { code: "c", message: "m" } });
    assert.ok(error instanceof kind, `${status} -> ${error.name}`);
    assert.ok(error instanceof MemMachineError);
    assert.equal(error.name, kind.name);
  }
  assert.ok(errorFor(422, {}) instanceof BadRequestError);
  assert.ok(errorFor(413, {}) instanceof BadRequestError);
  assert.ok(errorFor(503, {}) instanceof ServerError);
});

test("code, message, field and current_version come from the body", () => {
  const conflict = errorFor(409, {
    error: { code: "conflict", message: "stale", current_version: 7 },
  });
  assert.equal(conflict.code, "conflict");
  assert.equal(conflict.message, "stale");
  assert.equal(conflict.currentVersion, 7);
  const bad = errorFor(422, {
    error: { code: "invalid_input", message: "messages.0.content: empty", field: "messages.0.content" },
  });
  assert.equal(bad.field, "messages.0.content");
  assert.equal(String(bad), "InvalidInputError: 422 invalid_input: messages.0.content: empty");
  const bare = errorFor(502, "<html>bad gateway</html>");
  assert.equal(bare.code, "http_error");
  assert.equal(bare.message, "request failed with HTTP 502");
});

test("Retry-After is read as seconds or as an HTTP date", () => {
  assert.equal(parseRetryAfter("7"), 7);
  assert.equal(parseRetryAfter("1.5"), 1.5);
  assert.equal(parseRetryAfter(null), null);
  assert.equal(parseRetryAfter("soon"), null);
  const now = Date.parse("Wed, 21 Oct 2026 07:28:00 GMT");
  assert.equal(parseRetryAfter("Wed, 21 Oct 2026 07:28:30 GMT", now), 30);
  assert.equal(parseRetryAfter("Wed, 21 Oct 2026 07:27:00 GMT", now), 0);
});

test("bad ids are refused before anything is sent, naming the field", async () => {
  let sent = 0;
  const mm = new MemMachineClient({
    baseUrl: "http://127.0.0.1:9",
    fetch: () => {
      sent += 1;
      return Promise.reject(new Error("not reached"));
    },
  });
  assert.throws(() => mm.memory({ sessionId: "s1" }), (error: unknown) => {
    assert.ok(error instanceof InvalidInputError);
    assert.equal(error.field, "user_id");
    assert.equal(error.status, 422);
    return true;
  });
  assert.throws(() => mm.memory({ userId: "ana", agentId: "not valid!" }), {
    name: "InvalidInputError",
    field: "agent_id",
  });
  await assert.rejects(mm.memory({ userId: "ana" }).add("x"), { field: "session_id" });
  await assert.rejects(mm.memory({ userId: "ana" }).state.get(), { field: "session_id" });
  assert.equal(mm.memory({ userId: "Zoë_1@acme" }).userId, "Zoë_1@acme");
  assert.equal(sent, 0);
});
