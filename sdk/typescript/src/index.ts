/**
 * TypeScript client for the memmachine REST API: {@link MemMachineClient}, scoped handles
 * from `client.memory(...)`, typed errors and the API's types, generated from its OpenAPI
 * document. No dependencies beyond `fetch`.
 */

export type * from "./api.js";
export { ROUTES } from "./api.js";
export { Client, type ClientOptions, DEFAULT_TIMEOUT_MS, DEFAULT_URL, MemMachineClient } from "./client.js";
export {
  BadRequestError,
  ConflictError,
  type ErrorBody,
  errorFor,
  InvalidInputError,
  MemMachineAPIError,
  MemMachineConnectionError,
  MemMachineError,
  MemMachineTimeoutError,
  NotFoundError,
  PayloadTooLargeError,
  PermissionDeniedError,
  parseRetryAfter,
  RateLimitedError,
  ServerError,
  ServiceUnavailableError,
  UnauthorizedError,
} from "./errors.js";
export {
  Memory,
  type MessageLike,
  Profile,
  type Requester,
  type ScopeIds,
  type SessionState,
  State,
} from "./memory.js";
export { DEFAULT_RETRY, type RetryOptions, RetryPolicy } from "./retry.js";
export type { components, operations, paths } from "./schema.js";
