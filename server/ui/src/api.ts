// The REST API as the inspector uses it: every call carries the key entered at login and
// the org/project chosen in the header; errors come back as ApiError with the server's
// code, message and field.

export interface Me {
  tenant: string;
  key_id: string | null;
  can_read: boolean;
  can_write: boolean;
  is_admin: boolean;
  key_required: boolean;
}

export interface User {
  user_id: string;
  org_id: string;
  project_id: string;
  episodes: number;
  sessions: number;
  facts: number;
  working_sessions: number;
  last_active: string | null;
}

export interface Episode {
  id: string;
  content: string;
  role: string;
  producer: string | null;
  timestamp: string;
  sequence: number;
  user_id: string;
  session_id: string;
  agent_id: string | null;
  group_id: string | null;
  metadata: Record<string, unknown>;
  created_at: string;
  score: number | null;
  ranks: Record<string, number> | null;
  context: boolean;
  /** How the search's stages found and moved this hit (a search with `explain`). */
  explain?: HitExplanation | null;
}

/** What one retrieval stage did to one hit: rank and score before and after, boost. */
export interface HitStep {
  stage: string;
  rank_before: number | null;
  rank_after: number | null;
  score_before: number | null;
  score_after: number | null;
  boost: number | null;
}

export interface HitExplanation {
  sources: string[];
  entered: string;
  steps: HitStep[];
}

/** One retrieval stage of one search: whether it ran, was switched off, its time. */
export interface StageRun {
  name: string;
  ran: boolean;
  switched_off: boolean;
  seconds: number;
  switchable: boolean;
}

export interface SessionRow {
  session_id: string;
  episodes: number;
  first_at: string;
  last_at: string;
  updated_at: string;
}

export interface WorkingSession {
  session_id: string;
  message_count: number;
  version: number;
  summary: string | null;
  ttl_seconds: number | null;
  updated_at: string | null;
}

export interface Fact {
  id: string;
  user_id: string;
  tag: string;
  feature: string;
  value: string;
  confidence: number;
  effective_confidence: number | null;
  source: string;
  source_session_id: string | null;
  metadata: Record<string, unknown>;
  created_at: string;
  updated_at: string;
  source_episode_ids: string[];
  valid_from: string | null;
  score: number | null;
}

export interface FactVersion {
  fact_id: string;
  value: string;
  confidence: number;
  source: string;
  source_episode_ids: string[];
  valid_from: string;
  valid_to: string;
  reason: string;
  recorded_at: string;
}

export interface History {
  current: Fact | null;
  history: FactVersion[];
}

export interface WorkingMessage {
  role: string;
  content: string;
  producer: string | null;
  timestamp: string;
  metadata: Record<string, unknown>;
}

export interface WorkingMemory {
  user_id: string;
  session_id: string;
  messages: WorkingMessage[];
  message_count: number;
  first_index: number;
  state: Record<string, unknown>;
  summary: string | null;
  version: number;
  ttl_seconds: number | null;
  updated_at: string | null;
}

export interface Job {
  id: string;
  kind: string;
  status: "queued" | "running" | "done" | "dead";
  user_id: string;
  session_id: string | null;
  idempotency_key: string;
  payload: Record<string, unknown>;
  attempts: number;
  max_attempts: number;
  last_error: string | null;
  created_at: string;
  updated_at: string;
  available_at: string;
}

/** What a procedure and each of its superseded versions hold. */
interface ProcedureBody {
  goal: string;
  steps: string[];
  preconditions: string[];
  pitfalls: string[];
  confidence: number;
  source: string;
  source_session_ids: string[];
  successes: number;
  failures: number;
}

export interface Procedure extends ProcedureBody {
  id: string;
  org_id: string;
  project_id: string;
  agent_id: string | null;
  version: number;
  metadata: Record<string, unknown>;
  created_at: string;
  updated_at: string;
}

export interface ProcedureVersion extends ProcedureBody {
  reason: string;
  valid_from: string;
  valid_to: string;
}

/** A procedure with its search score (`null` when listed, not searched). */
export interface ProcedureHit {
  procedure: Procedure;
  score: number | null;
}

export interface SearchResult {
  episodic: Episode[];
  profile: Fact[];
  working: WorkingMemory | null;
  explain?: { stages: StageRun[] } | null;
}

export interface PromptResult {
  format: string;
  messages: unknown[];
  system: string;
  body: Record<string, unknown>;
  fact_ids: string[];
  episode_ids: string[];
  message_count: number;
  summary_included: boolean;
  token_count: number;
  max_tokens: number;
  dropped: Record<string, number>;
}

export interface ForgetPreview {
  user_id: string;
  session_id: string | null;
  episodes: number;
  facts: number;
  sessions: number;
  working_sessions: number;
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly field?: string,
  ) {
    super(message);
  }
}

const KEY = "memmachine.inspector.key";
const SPACE = "memmachine.inspector.space";

export function storedKey(): string {
  return sessionStorage.getItem(KEY) ?? "";
}

export function storeKey(key: string): void {
  if (key) sessionStorage.setItem(KEY, key);
  else sessionStorage.removeItem(KEY);
}

export interface Space {
  org_id: string;
  project_id: string;
}

export function storedSpace(): Space {
  try {
    const raw = JSON.parse(sessionStorage.getItem(SPACE) ?? "{}");
    return { org_id: raw.org_id || "default", project_id: raw.project_id || "default" };
  } catch {
    return { org_id: "default", project_id: "default" };
  }
}

export function storeSpace(space: Space): void {
  sessionStorage.setItem(SPACE, JSON.stringify(space));
}

type Query = Record<string, string | number | boolean | null | undefined>;

export async function call<T>(
  method: string,
  path: string,
  options: { query?: Query; body?: unknown; key?: string } = {},
): Promise<T> {
  const space = storedSpace();
  const url = new URL(path, location.origin);
  for (const [name, value] of Object.entries(options.query ?? {})) {
    if (value !== undefined && value !== null && value !== "") {
      url.searchParams.set(name, String(value));
    }
  }
  const headers: Record<string, string> = {
    "X-Org-ID": space.org_id,
    "X-Project-ID": space.project_id,
  };
  const key = options.key ?? storedKey();
  if (key) headers.Authorization = `Bearer ${key}`;
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(url, {
    method,
    headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
  });
  if (response.status === 204) return undefined as T;
  const text = await response.text();
  let data: unknown = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) {
    const error = (data as { error?: { code?: string; message?: string; field?: string } })
      ?.error;
    throw new ApiError(
      response.status,
      error?.code ?? "http_error",
      error?.message ?? `${response.status} ${response.statusText}`,
      error?.field,
    );
  }
  return data as T;
}

export const api = {
  whoami: (key?: string) => call<Me>("GET", "/v1/whoami", { key }),
  users: (query: Query) =>
    call<{ users: User[]; next_after: string | null }>("GET", "/v1/users", { query }),
  user: (user: string) => call<User>("GET", `/v1/users/${enc(user)}`),
  sessions: (user: string, limit: number, offset: number) =>
    call<{ sessions: SessionRow[]; working: WorkingSession[] }>(
      "GET",
      `/v1/users/${enc(user)}/sessions`,
      { query: { limit, offset } },
    ),
  timeline: (user: string, bucket_seconds: number, session_id?: string) =>
    call<{ bucket_seconds: number; buckets: { start: string; count: number }[] }>(
      "GET",
      `/v1/users/${enc(user)}/timeline`,
      { query: { bucket_seconds, session_id } },
    ),
  forgetPreview: (user: string, session_id?: string) =>
    call<ForgetPreview>("GET", `/v1/users/${enc(user)}/forget-preview`, {
      query: { session_id },
    }),
  jobCounts: (user: string) =>
    call<Record<Job["status"], number>>("GET", `/v1/users/${enc(user)}/job-counts`),
  episodes: (user: string, session_id: string, limit: number, offset: number) =>
    call<{ episodes: Episode[]; total: number }>("GET", "/v1/memories", {
      query: { user_id: user, session_id, limit, offset },
    }),
  neighbours: (user: string, id: string, around: number) =>
    call<{ episode: Episode; before: Episode[]; after: Episode[] }>(
      "GET",
      `/v1/memories/${enc(id)}/neighbours`,
      { query: { user_id: user, before: around, after: around } },
    ),
  deleteEpisode: (user: string, id: string) =>
    call<void>("DELETE", `/v1/memories/${enc(id)}`, { query: { user_id: user } }),
  forgetSession: (user: string, session: string) =>
    call<{ episodes_deleted: number }>("DELETE", `/v1/sessions/${enc(session)}`, {
      query: { user_id: user },
    }),
  forgetUser: (user: string) => call<unknown>("DELETE", `/v1/users/${enc(user)}`),
  facts: (user: string) =>
    call<{ facts: Fact[] }>("GET", "/v1/profile", { query: { user_id: user } }),
  setFact: (user: string, fact: Partial<Fact>) =>
    call<{ facts: Fact[] }>("POST", "/v1/profile", { body: { user_id: user, facts: [fact] } }),
  invalidate: (user: string, id: string, reason: string) =>
    call<History>("POST", `/v1/profile/facts/${enc(id)}/invalidate`, {
      body: { user_id: user, reason },
    }),
  history: (user: string, tag: string, feature: string) =>
    call<History>("GET", "/v1/profile/history", { query: { user_id: user, tag, feature } }),
  working: (user: string, session: string, last_n: number) =>
    call<WorkingMemory>("GET", `/v1/sessions/${enc(session)}/working`, {
      query: { user_id: user, last_n },
    }),
  prompt: (body: Record<string, unknown>) =>
    call<PromptResult>("POST", "/v1/memory-prompt", { body }),
  search: (body: Record<string, unknown>) =>
    call<SearchResult>("POST", "/v1/memories/search", { body }),
  jobs: (user: string, status?: string) =>
    call<{ jobs: Job[] }>("GET", "/v1/jobs", { query: { user_id: user, status, limit: 200 } }),
  procedures: () =>
    call<{ procedures: Procedure[] }>("GET", "/v1/procedures", { query: { limit: 1000 } }),
  searchProcedures: (query: string) =>
    call<{ hits: ProcedureHit[] }>("POST", "/v1/procedures/search", { body: { query, top_k: 20 } }),
  procedureHistory: (id: string) =>
    call<{ current: Procedure; history: ProcedureVersion[] }>(
      "GET",
      `/v1/procedures/${enc(id)}/history`,
    ),
  replay: (user: string, id: string) =>
    call<Job>("POST", `/v1/jobs/${enc(id)}/replay`, { query: { user_id: user } }),
};

function enc(value: string): string {
  return encodeURIComponent(value);
}
