/**
 * Errors the client throws. Every one is a {@link MemMachineError} and carries `status`
 * (the HTTP status, `null` when no response arrived), `code` (the server's error code),
 * `message` and `field` (the dotted path of the bad input, when there is one). The tree
 * mirrors the Python SDK's `memmachine_sdk.errors`:
 *
 *     MemMachineError
 *     ├── MemMachineAPIError           the server answered with an error status
 *     │   ├── BadRequestError          400
 *     │   │   ├── InvalidInputError    422 (also thrown before sending for invalid input)
 *     │   │   └── PayloadTooLargeError 413
 *     │   ├── UnauthorizedError        401 missing or unknown API key
 *     │   ├── PermissionDeniedError    403 the key may not do this
 *     │   ├── NotFoundError            404
 *     │   ├── ConflictError            409 (`currentVersion` for working memory)
 *     │   ├── RateLimitedError         429 (`retryAfter` in seconds)
 *     │   └── ServerError              5xx
 *     │       └── ServiceUnavailableError  503
 *     └── MemMachineConnectionError    no response: refused, reset, DNS...
 *         └── MemMachineTimeoutError   no response within the timeout
 */

import type { components } from "./schema.js";

/** The error body every error response carries: `{"error": {"code", "message", ...}}`. */
export type ErrorBody = components["schemas"]["ErrorBody"];

/** Base of everything the client throws on purpose. */
export class MemMachineError extends Error {
  readonly status: number | null;
  readonly code: string;
  readonly field: string | null;

  constructor(
    message: string,
    options: { status?: number | null; code?: string; field?: string | null; cause?: unknown } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.status = options.status ?? null;
    this.code = options.code ?? "error";
    this.field = options.field ?? null;
  }
}

/**
 * No response arrived: the connection was refused, reset or could not be opened.
 *
 * For a request that is not safe to repeat (adding memories, appending messages) this
 * does not say whether the server acted on it before the connection broke.
 */
export class MemMachineConnectionError extends MemMachineError {
  /**
   * False when the request certainly never reached the server (the connection could not
   * be opened), so the server did nothing.
   */
  readonly requestSent: boolean;

  constructor(
    message: string,
    options: { requestSent?: boolean; code?: string; cause?: unknown } = {},
  ) {
    super(message, { code: options.code ?? "connection_error", cause: options.cause });
    this.requestSent = options.requestSent ?? true;
  }
}

/** No response within the client's timeout; the request may have reached the server. */
export class MemMachineTimeoutError extends MemMachineConnectionError {
  constructor(message: string, options: { cause?: unknown } = {}) {
    super(message, { requestSent: true, code: "timeout", cause: options.cause });
  }
}

/** The server answered with an error status. `body` is the decoded error body. */
export class MemMachineAPIError extends MemMachineError {
  declare readonly status: number;
  readonly body: unknown;
  /** The working-memory version now, on a conflict over a stale `expected_version`. */
  readonly currentVersion: number | null;
  /** Seconds the server asked to wait before trying again (Retry-After), if it did. */
  readonly retryAfter: number | null;

  constructor(
    status: number,
    code: string,
    message: string,
    body: unknown = null,
    options: { retryAfter?: number | null } = {},
  ) {
    const detail = detailOf(body);
    super(message, {
      status,
      code,
      field: typeof detail.field === "string" ? detail.field : null,
    });
    this.body = body;
    this.currentVersion =
      typeof detail.current_version === "number" ? detail.current_version : null;
    this.retryAfter = options.retryAfter ?? null;
  }

  override toString(): string {
    return `${this.name}: ${this.status} ${this.code}: ${this.message}`;
  }
}

/** The request was refused as malformed (400); base of the other bad-input errors. */
export class BadRequestError extends MemMachineAPIError {}
/** A field failed validation (422); `field` names it, e.g. `messages.0.content`. */
export class InvalidInputError extends BadRequestError {}
/** The request, a message or the state is over the server's size limits (413). */
export class PayloadTooLargeError extends BadRequestError {}
/** No API key, or one the server does not know (401). */
export class UnauthorizedError extends MemMachineAPIError {}
/** The API key is valid but may not do this, e.g. a read-only key writing (403). */
export class PermissionDeniedError extends MemMachineAPIError {}
/** The thing does not exist in the caller's scope (404). */
export class NotFoundError extends MemMachineAPIError {}
/** A write based on a stale version (409); `currentVersion` is the version now. */
export class ConflictError extends MemMachineAPIError {}
/** Too many requests for this key (429); `retryAfter` says how long to wait. */
export class RateLimitedError extends MemMachineAPIError {}
/** The server failed (5xx). */
export class ServerError extends MemMachineAPIError {}
/** A store behind the server is unavailable (503); the request changed nothing. */
export class ServiceUnavailableError extends ServerError {}

type ApiErrorClass = new (
  status: number,
  code: string,
  message: string,
  body?: unknown,
  options?: { retryAfter?: number | null },
) => MemMachineAPIError;

const KINDS: Record<number, ApiErrorClass> = {
  400: BadRequestError,
  401: UnauthorizedError,
  403: PermissionDeniedError,
  404: NotFoundError,
  409: ConflictError,
  413: PayloadTooLargeError,
  422: InvalidInputError,
  429: RateLimitedError,
  503: ServiceUnavailableError,
};

function detailOf(body: unknown): Record<string, unknown> {
  if (typeof body !== "object" || body === null) return {};
  const detail = (body as { error?: unknown }).error;
  return typeof detail === "object" && detail !== null ? (detail as Record<string, unknown>) : {};
}

/**
 * The typed error for an error response: its class follows `status`; `code`, `message`
 * and `field` come from the body's `error` object when it has one.
 */
export function errorFor(
  status: number,
  body: unknown,
  retryAfter: number | null = null,
): MemMachineAPIError {
  const detail = detailOf(body);
  const code = typeof detail.code === "string" ? detail.code : "http_error";
  const message =
    typeof detail.message === "string" ? detail.message : `request failed with HTTP ${status}`;
  const kind = KINDS[status] ?? (status >= 500 ? ServerError : MemMachineAPIError);
  return new kind(status, code, message, body, { retryAfter });
}

/** The error for bad input found before sending, shaped like the server's 422. */
export function invalid(field: string, message: string): InvalidInputError {
  return new InvalidInputError(422, "invalid_input", `${field}: ${message}`, {
    error: { code: "invalid_input", message, field },
  });
}

/**
 * Seconds to wait from a Retry-After header (delta-seconds or an HTTP date); `null` when
 * absent or unreadable. Never negative.
 */
export function parseRetryAfter(value: string | null, now: number = Date.now()): number | null {
  if (value === null || value.trim() === "") return null;
  const text = value.trim();
  if (/^\d+(\.\d+)?$/.test(text)) return Math.max(0, Number(text));
  const when = Date.parse(text);
  if (Number.isNaN(when)) return null;
  return Math.max(0, (when - now) / 1000);
}
