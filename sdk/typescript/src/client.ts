import {
  type CallArgs,
  type HealthResponse,
  type Method,
  type Ok,
  type OperationId,
  ROUTES,
} from "./api.js";
import {
  errorFor,
  MemMachineAPIError,
  MemMachineConnectionError,
  MemMachineError,
  MemMachineTimeoutError,
  parseRetryAfter,
} from "./errors.js";
import { Memory, type ScopeIds } from "./memory.js";
import { type RetryOptions, RetryPolicy } from "./retry.js";

/** Where the client connects when neither `baseUrl` nor `MEMMACHINE_URL` says. */
export const DEFAULT_URL = "http://127.0.0.1:8080";
/** Milliseconds one attempt may take, response body included. */
export const DEFAULT_TIMEOUT_MS = 30_000;

export interface ClientOptions extends Omit<ScopeIds, "sessionId"> {
  /** The server; default `MEMMACHINE_URL` (when there is a `process.env`), else {@link DEFAULT_URL}. */
  baseUrl?: string;
  /** Sent as `Authorization: Bearer`; default `MEMMACHINE_API_KEY`. */
  apiKey?: string;
  /**
   * Milliseconds one attempt may take, response included; then `MemMachineTimeoutError`.
   * Default {@link DEFAULT_TIMEOUT_MS}.
   */
  timeoutMs?: number;
  /** Retries after the first attempt (default 2); see {@link RetryPolicy}. */
  maxRetries?: number;
  /** The whole retry policy (wins over `maxRetries`). */
  retry?: RetryPolicy | Partial<RetryOptions>;
  /** The `fetch` to send with (default: the global one). */
  fetch?: typeof fetch;
}

/** Connection errors whose request never left this machine: the server did nothing. */
const NOT_SENT = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "UND_ERR_CONNECT_TIMEOUT",
]);

function environment(): Record<string, string | undefined> {
  const holder = globalThis as { process?: { env?: Record<string, string | undefined> } };
  return holder.process?.env ?? {};
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function codeOf(error: unknown): string | undefined {
  for (let current: unknown = error; current; current = (current as { cause?: unknown }).cause) {
    const code = (current as { code?: unknown }).code;
    if (typeof code === "string") return code;
  }
  return undefined;
}

interface Answer {
  status: number;
  headers: Headers;
  text: string;
}

/**
 * Client for the memmachine REST API.
 *
 * ```ts
 * const mm = new MemMachineClient({ apiKey: "..." });
 * const chat = mm.memory({ userId: "ana", sessionId: "s1" });
 * await chat.add("I adopted a beagle called Toast");
 * const hits = await chat.search("what dog does she have?");
 * ```
 *
 * Every operation of the API is reachable, typed, through {@link MemMachineClient.request};
 * errors are {@link MemMachineError} subclasses.
 */
export class MemMachineClient {
  readonly baseUrl: string;
  readonly retry: RetryPolicy;
  readonly timeoutMs: number;
  private readonly headers: Record<string, string>;
  private readonly ids: Omit<ScopeIds, "sessionId">;
  private readonly fetcher: typeof fetch;

  constructor(options: ClientOptions = {}) {
    const env = environment();
    const url = options.baseUrl ?? env.MEMMACHINE_URL ?? DEFAULT_URL;
    this.baseUrl = url.replace(/\/+$/, "");
    const key = options.apiKey ?? env.MEMMACHINE_API_KEY;
    this.headers = { accept: "application/json" };
    if (key) this.headers.authorization = `Bearer ${key}`;
    if (options.retry instanceof RetryPolicy) this.retry = options.retry;
    else this.retry = new RetryPolicy({ maxRetries: options.maxRetries, ...options.retry });
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.ids = {
      userId: options.userId,
      orgId: options.orgId,
      projectId: options.projectId,
      agentId: options.agentId,
      groupId: options.groupId,
    };
    const fetcher = options.fetch ?? globalThis.fetch;
    if (typeof fetcher !== "function") {
      throw new TypeError("no fetch: pass options.fetch on a runtime without a global fetch");
    }
    this.fetcher = fetcher;
  }

  /**
   * A handle on one user's memory (one session's, with `sessionId`); ids not given fall
   * back to the client's. A missing or malformed id throws `InvalidInputError` naming it,
   * before anything is sent.
   */
  memory(ids: ScopeIds = {}): Memory {
    const merged: ScopeIds = { ...this.ids };
    for (const [name, value] of Object.entries(ids) as [keyof ScopeIds, string | undefined][]) {
      if (value !== undefined) merged[name] = value;
    }
    return new Memory(this, merged);
  }

  /** Liveness, each store's state and the search mode (hybrid or lexical-only). */
  health(): Promise<HealthResponse> {
    return this.request("get_health");
  }

  /**
   * Call any operation of the API by its OpenAPI `operationId`, typed from the document:
   * `client.request("list_jobs", { query: { user_id: "ana", status: "dead" } })`.
   * Retried, timed and mapped to typed errors like every other call.
   */
  async request<K extends OperationId>(operation: K, args: CallArgs<K> = {}): Promise<Ok<K>> {
    const [method, template] = ROUTES[operation] as readonly [Method, string];
    const url = this.url(template, args);
    const idempotent = args.idempotent ?? method !== "POST";
    const headers: Record<string, string> = { ...this.headers };
    let body: string | undefined;
    if (args.body !== undefined) {
      headers["content-type"] = "application/json";
      body = JSON.stringify(args.body);
    }
    for (let retry = 0; ; retry++) {
      let error: MemMachineError;
      try {
        const answer = await this.attempt(method, url, headers, body);
        if (answer.status < 400) return this.parse<K>(answer, method, template);
        error = this.errorOf(answer);
      } catch (caught) {
        if (!(caught instanceof MemMachineError)) throw caught;
        error = caught;
      }
      const delay = this.retry.delay(error, retry, idempotent);
      if (delay === null) throw error;
      await sleep(delay);
    }
  }

  private url<K extends OperationId>(template: string, args: CallArgs<K>): string {
    const values = (args.path ?? {}) as Record<string, string>;
    const path = template.replace(/\{(\w+)\}/g, (_, name: string) => {
      const value = values[name];
      if (value === undefined) throw new TypeError(`path parameter ${name} is missing`);
      return encodeURIComponent(value);
    });
    const query = new URLSearchParams();
    for (const [name, value] of Object.entries((args.query ?? {}) as Record<string, unknown>)) {
      if (value !== undefined && value !== null) query.append(name, String(value));
    }
    const text = query.toString();
    return this.baseUrl + path + (text ? `?${text}` : "");
  }

  /** One exchange within the timeout, response body read; transport failures typed. */
  private async attempt(
    method: Method,
    url: string,
    headers: Record<string, string>,
    body: string | undefined,
  ): Promise<Answer> {
    const controller = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      controller.abort();
    }, this.timeoutMs);
    try {
      const response = await this.fetcher(url, {
        method,
        headers,
        body,
        signal: controller.signal,
      });
      const text = await response.text();
      return { status: response.status, headers: response.headers, text };
    } catch (caught) {
      if (timedOut) {
        throw new MemMachineTimeoutError(
          `no response from ${this.baseUrl} within ${this.timeoutMs} ms`,
          { cause: caught },
        );
      }
      const code = codeOf(caught);
      const reason = code ?? (caught instanceof Error ? caught.message : String(caught));
      throw new MemMachineConnectionError(`cannot reach ${this.baseUrl}: ${reason}`, {
        requestSent: !(code !== undefined && NOT_SENT.has(code)),
        cause: caught,
      });
    } finally {
      clearTimeout(timer);
    }
  }

  private errorOf(answer: Answer): MemMachineAPIError {
    let body: unknown;
    try {
      body = JSON.parse(answer.text);
    } catch {
      body = { error: { code: "http_error", message: answer.text.slice(0, 500) } };
    }
    return errorFor(answer.status, body, parseRetryAfter(answer.headers.get("retry-after")));
  }

  private parse<K extends OperationId>(answer: Answer, method: string, path: string): Ok<K> {
    if (answer.status === 204 || answer.text === "") return undefined as Ok<K>;
    try {
      return JSON.parse(answer.text) as Ok<K>;
    } catch {
      throw new MemMachineAPIError(
        answer.status,
        "invalid_response",
        `the server's answer to ${method} ${path} is not JSON: ${answer.text.slice(0, 300)}`,
      );
    }
  }
}

export { MemMachineClient as Client };
