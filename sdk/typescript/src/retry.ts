import {
  MemMachineAPIError,
  MemMachineConnectionError,
  type MemMachineError,
  RateLimitedError,
  ServiceUnavailableError,
} from "./errors.js";

/** Gateway errors: a proxy in front of the server gave up; the server may have acted. */
const GATEWAY = new Set([502, 504]);

export interface RetryOptions {
  /** Retries after the first attempt (a request is sent at most `maxRetries + 1` times). */
  maxRetries: number;
  /** The backoff ceiling before retry `n` is `min(backoffMaxMs, backoffBaseMs * 2**n)`. */
  backoffBaseMs: number;
  backoffMaxMs: number;
  /** A `Retry-After` longer than this is not waited for: the error is thrown at once. */
  maxRetryAfterMs: number;
}

export const DEFAULT_RETRY: RetryOptions = {
  maxRetries: 2,
  backoffBaseMs: 500,
  backoffMaxMs: 8000,
  maxRetryAfterMs: 60_000,
};

/**
 * How a client retries; the same rule as the Python SDK's `RetryPolicy`.
 *
 * Between attempts the client waits the server's `Retry-After` when it sent one,
 * otherwise a random time between 0 and `min(backoffMaxMs, backoffBaseMs * 2**n)` before
 * retry `n` (0-based): exponential backoff with full jitter.
 *
 * What is retried:
 *
 * - 429 and 503, for every request: the server refused or failed before acting (its
 *   writes are all-or-nothing);
 * - connection failures before the request was sent (refused, unknown host), for every
 *   request;
 * - 502, 504, timeouts and dropped connections only for requests that are safe to repeat
 *   (reads, searches, PUT without `expected_version`, DELETE): the server may have acted
 *   on the first attempt, and adding memories twice would store them twice — the API has
 *   no idempotency key for writes.
 */
export class RetryPolicy {
  readonly maxRetries: number;
  readonly backoffBaseMs: number;
  readonly backoffMaxMs: number;
  readonly maxRetryAfterMs: number;

  constructor(options: Partial<RetryOptions> = {}) {
    const merged = { ...DEFAULT_RETRY };
    for (const [name, value] of Object.entries(options) as [keyof RetryOptions, number][]) {
      if (value !== undefined) merged[name] = value;
    }
    for (const [name, value] of Object.entries(merged)) {
      if (!Number.isFinite(value) || value < 0) throw new RangeError(`${name} must be >= 0`);
    }
    this.maxRetries = merged.maxRetries;
    this.backoffBaseMs = merged.backoffBaseMs;
    this.backoffMaxMs = merged.backoffMaxMs;
    this.maxRetryAfterMs = merged.maxRetryAfterMs;
  }

  /** A full-jitter delay before retry number `retry` (0 for the first retry). */
  backoff(retry: number, random: () => number = Math.random): number {
    const ceiling = Math.min(this.backoffMaxMs, this.backoffBaseMs * 2 ** retry);
    return random() * ceiling;
  }

  /**
   * Milliseconds to wait before sending again after `error`, or `null` to give up.
   * `retry` counts the retries already made.
   */
  delay(
    error: MemMachineError,
    retry: number,
    idempotent: boolean,
    random: () => number = Math.random,
  ): number | null {
    if (retry >= this.maxRetries) return null;
    if (error instanceof RateLimitedError || error instanceof ServiceUnavailableError) {
      if (error.retryAfter !== null) {
        const wait = error.retryAfter * 1000;
        return wait <= this.maxRetryAfterMs ? wait : null;
      }
      return this.backoff(retry, random);
    }
    if (error instanceof MemMachineAPIError) {
      return GATEWAY.has(error.status) && idempotent ? this.backoff(retry, random) : null;
    }
    if (error instanceof MemMachineConnectionError) {
      return idempotent || !error.requestSent ? this.backoff(retry, random) : null;
    }
    return null;
  }
}
