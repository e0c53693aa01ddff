/**
 * The REST API as types, derived from the generated `schema.ts` (itself generated from the
 * server's OpenAPI document): every operation, where it lives, what it takes and what it
 * answers. A change of the document that this client does not follow fails to compile.
 */

import type { components, operations, paths } from "./schema.js";

export type Schemas = components["schemas"];
export type OperationId = keyof operations;
export type Method = "GET" | "POST" | "PUT" | "DELETE";

type Json<R> = R extends { content: { "application/json": infer T } } ? T : undefined;
type SuccessOf<R> = R extends { 200: infer A }
  ? Json<A>
  : R extends { 201: infer B }
    ? Json<B>
    : undefined;

/** What an operation answers on success (`undefined` for 204 No Content). */
export type Ok<K extends OperationId> = SuccessOf<operations[K]["responses"]>;

/** The JSON body an operation takes (`never` when it takes none). */
export type Body<K extends OperationId> = operations[K] extends {
  requestBody?: { content: { "application/json": infer B } };
}
  ? B
  : never;

/** The query parameters an operation takes. */
export type Query<K extends OperationId> = operations[K]["parameters"] extends {
  query?: infer Q;
}
  ? NonNullable<Q>
  : never;

/** The path parameters an operation takes. */
export type PathParams<K extends OperationId> = operations[K]["parameters"] extends {
  path: infer P;
}
  ? P
  : never;

/** `[method, path]` of the path item whose `method` is operation `K`, as a type. */
type RouteOf<K extends OperationId> = {
  [P in keyof paths]: {
    [M in Method]: paths[P][Lowercase<M>] extends operations[K]
      ? operations[K] extends paths[P][Lowercase<M>]
        ? readonly [M, P]
        : never
      : never;
  }[Method];
}[keyof paths];

/** Where every operation of the document lives (the compiler checks each entry). */
export const ROUTES: { readonly [K in OperationId]: RouteOf<K> } = {
  get_health: ["GET", "/health"],
  add_memories: ["POST", "/v1/memories"],
  list_memories: ["GET", "/v1/memories"],
  search_memories: ["POST", "/v1/memories/search"],
  get_memory: ["GET", "/v1/memories/{episode_id}"],
  delete_memory: ["DELETE", "/v1/memories/{episode_id}"],
  upload_attachment: ["POST", "/v1/memories/attachments"],
  download_attachment: ["GET", "/v1/memories/{episode_id}/attachment"],
  get_profile: ["GET", "/v1/profile"],
  set_profile: ["POST", "/v1/profile"],
  delete_facts: ["DELETE", "/v1/profile"],
  get_profile_history: ["GET", "/v1/profile/history"],
  invalidate_fact: ["POST", "/v1/profile/facts/{fact_id}/invalidate"],
  search_profile: ["POST", "/v1/profile/search"],
  get_fact: ["GET", "/v1/profile/facts/{fact_id}"],
  delete_fact: ["DELETE", "/v1/profile/facts/{fact_id}"],
  get_working: ["GET", "/v1/sessions/{session_id}/working"],
  put_working: ["PUT", "/v1/sessions/{session_id}/working"],
  delete_working: ["DELETE", "/v1/sessions/{session_id}/working"],
  append_working: ["POST", "/v1/sessions/{session_id}/working/messages"],
  compact_working: ["POST", "/v1/sessions/{session_id}/compact"],
  forget_session: ["DELETE", "/v1/sessions/{session_id}"],
  forget_user: ["DELETE", "/v1/users/{user_id}"],
  memory_prompt: ["POST", "/v1/memory-prompt"],
  list_tools: ["GET", "/v1/tools"],
  execute_tool: ["POST", "/v1/tools/execute"],
  list_jobs: ["GET", "/v1/jobs"],
  get_job: ["GET", "/v1/jobs/{job_id}"],
  replay_job: ["POST", "/v1/jobs/{job_id}/replay"],
  purge_dead_jobs: ["DELETE", "/v1/jobs/dead"],
  create_key: ["POST", "/v1/admin/keys"],
  list_keys: ["GET", "/v1/admin/keys"],
  revoke_key: ["DELETE", "/v1/admin/keys/{key_id}"],
  get_retention: ["GET", "/v1/admin/retention"],
  put_retention: ["PUT", "/v1/admin/retention"],
  run_retention_sweep: ["POST", "/v1/admin/retention/sweep"],
  list_memory_types: ["GET", "/v1/memory-types"],
  store_custom: ["POST", "/v1/memory-types/{name}/store"],
  retrieve_custom: ["POST", "/v1/memory-types/{name}/retrieve"],
  whoami: ["GET", "/v1/whoami"],
  list_users: ["GET", "/v1/users"],
  get_user: ["GET", "/v1/users/{user_id}"],
  list_sessions: ["GET", "/v1/users/{user_id}/sessions"],
  timeline: ["GET", "/v1/users/{user_id}/timeline"],
  forget_preview: ["GET", "/v1/users/{user_id}/forget-preview"],
  job_counts: ["GET", "/v1/users/{user_id}/job-counts"],
  neighbours: ["GET", "/v1/memories/{episode_id}/neighbours"],
  add_procedure: ["POST", "/v1/procedures"],
  list_procedures: ["GET", "/v1/procedures"],
  search_procedures: ["POST", "/v1/procedures/search"],
  get_procedure: ["GET", "/v1/procedures/{procedure_id}"],
  procedure_history: ["GET", "/v1/procedures/{procedure_id}/history"],
  report_procedure_use: ["POST", "/v1/procedures/{procedure_id}/uses"],
  delete_procedure: ["DELETE", "/v1/procedures/{procedure_id}"],
  set_session_outcome: ["POST", "/v1/sessions/{session_id}/outcome"],
};

/** One call of operation `K`. */
export interface CallArgs<K extends OperationId> {
  path?: PathParams<K>;
  query?: Query<K>;
  body?: Body<K>;
  /**
   * Whether sending it twice has the effect of sending it once, which decides whether it
   * is retried after an ambiguous failure (a timeout, a dropped connection, 502/504).
   * Default: GET, PUT and DELETE are, POST is not.
   */
  idempotent?: boolean;
}

// The wire models, by their OpenAPI names.
export type AddMemoriesResponse = Schemas["AddMemoriesResponse"];
export type EpisodeListResponse = Schemas["EpisodeListResponse"];
export type EpisodeOut = Schemas["EpisodeOut"];
export type FactIn = Schemas["FactIn"];
export type FactOut = Schemas["FactOut"];
export type ForgetResponse = Schemas["ForgetResponse"];
export type HealthResponse = Schemas["HealthResponse"];
export type MemoryPromptResponse = Schemas["MemoryPromptResponse"];
export type MessageIn = Schemas["MessageIn"];
export type ProfileHistoryResponse = Schemas["ProfileHistoryResponse"];
export type SearchResponse = Schemas["SearchResponse"];
export type WorkingMemoryOut = Schemas["WorkingMemoryOut"];
export type ProcedureIn = Schemas["ProcedureIn"];
export type ProcedureOut = Schemas["ProcedureOut"];
export type ProcedureSearchResponse = Schemas["ProcedureSearchResponse"];
export type ProcedureHistoryResponse = Schemas["ProcedureHistoryResponse"];
export type SessionOutcomeResponse = Schemas["SessionOutcomeResponse"];
export type MemoryType = Schemas["SearchRequest"]["types"] extends (infer T)[] | undefined
  ? T
  : never;
export type PromptFormat = NonNullable<Schemas["MemoryPromptRequest"]["format"]>;
