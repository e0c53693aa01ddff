/**
 * Scoped handles: `client.memory({ userId, sessionId })` binds the ids once, so every call
 * on the handle reads and writes that user's (and session's) memory. The same handle as
 * the Python SDK's `client.memory(...)`.
 */

import type {
  AddMemoriesResponse,
  CallArgs,
  EpisodeListResponse,
  FactIn,
  FactOut,
  ForgetResponse,
  MemoryPromptResponse,
  MemoryType,
  MessageIn,
  Ok,
  OperationId,
  ProfileHistoryResponse,
  PromptFormat,
  SearchResponse,
  WorkingMemoryOut,
} from "./api.js";
import { invalid } from "./errors.js";

/** The ids a handle binds; `userId` is required (on the handle or the client). */
export interface ScopeIds {
  userId?: string;
  sessionId?: string;
  agentId?: string;
  groupId?: string;
  orgId?: string;
  projectId?: string;
}

/** A message as text, or with its role, producer, timestamp and metadata. */
export type MessageLike = string | MessageIn;

/**
 * A session's working-memory state and the version it was read or written at. `version`
 * is 0 for a session never written and grows by one with every write to the session's
 * working memory (messages included); pass it as `expectedVersion` to make the next write
 * conditional.
 */
export interface SessionState {
  value: Record<string, unknown>;
  version: number;
  updatedAt: string | null;
}

/** What sends a handle's calls (the client). */
export interface Requester {
  request<K extends OperationId>(operation: K, args?: CallArgs<K>): Promise<Ok<K>>;
}

/** The server's id rule (`^[\w.@+\-=#~|]{1,128}$`, `\w` as Python reads it). */
const ID = /^[\p{L}\p{M}\p{N}\p{Pc}.@+\-=#~|]{1,128}$/u;

const WIRE_NAMES = {
  userId: "user_id",
  sessionId: "session_id",
  agentId: "agent_id",
  groupId: "group_id",
  orgId: "org_id",
  projectId: "project_id",
} as const;

interface WireIds {
  user_id: string;
  agent_id?: string;
  group_id?: string;
  org_id?: string;
  project_id?: string;
}

function sessionStateOf(working: WorkingMemoryOut): SessionState {
  return { value: working.state, version: working.version, updatedAt: working.updated_at };
}

/**
 * One user's memory, or one session's with `sessionId`; made by
 * `MemMachineClient.memory(...)`. `profile` and `state` are sub-handles.
 */
export class Memory {
  readonly userId: string;
  readonly sessionId: string | null;
  readonly agentId: string | null;
  readonly groupId: string | null;
  readonly orgId: string | null;
  readonly projectId: string | null;
  /** The user's profile facts. */
  readonly profile: Profile;
  /** The session's working-memory state (needs `sessionId`). */
  readonly state: State;
  /** @internal */
  readonly client: Requester;

  constructor(client: Requester, ids: ScopeIds) {
    for (const [name, wire] of Object.entries(WIRE_NAMES) as [keyof ScopeIds, string][]) {
      const value = ids[name];
      if (value !== undefined && !ID.test(value)) {
        throw invalid(wire, "must be 1-128 characters of letters, digits and . _ @ + - = # ~ |");
      }
    }
    if (ids.userId === undefined) {
      throw invalid("user_id", "a memory handle needs a userId (on the handle or the client)");
    }
    this.client = client;
    this.userId = ids.userId;
    this.sessionId = ids.sessionId ?? null;
    this.agentId = ids.agentId ?? null;
    this.groupId = ids.groupId ?? null;
    this.orgId = ids.orgId ?? null;
    this.projectId = ids.projectId ?? null;
    this.profile = new Profile(this);
    this.state = new State(this);
  }

  /** The bound ids as the API names them, the session left out. @internal */
  wireIds(): WireIds {
    const ids: WireIds = { user_id: this.userId };
    if (this.agentId !== null) ids.agent_id = this.agentId;
    if (this.groupId !== null) ids.group_id = this.groupId;
    if (this.orgId !== null) ids.org_id = this.orgId;
    if (this.projectId !== null) ids.project_id = this.projectId;
    return ids;
  }

  /** The session, or `InvalidInputError` naming `session_id`. @internal */
  session(what: string): string {
    if (this.sessionId === null) {
      throw invalid("session_id", `${what} needs a session: client.memory({ sessionId })`);
    }
    return this.sessionId;
  }

  /**
   * Store one message or several (text or `MessageIn`) as episodes of the session, in
   * order, and with `working` (default) also in its working memory. All or nothing. Not
   * retried after a timeout, which could store them twice. A message with a `timestamp`
   * that is already stored is answered with its episode, its id in `repeated_ids`.
   */
  async add(
    messages: MessageLike | MessageLike[],
    options: { working?: boolean } = {},
  ): Promise<AddMemoriesResponse> {
    const items = Array.isArray(messages) ? messages : [messages];
    return this.client.request("add_memories", {
      body: {
        ...this.wireIds(),
        session_id: this.session("add"),
        messages: items.map((item) => (typeof item === "string" ? { content: item } : item)),
        working: options.working ?? true,
      },
    });
  }

  /**
   * Episodes, profile facts and (with a session) working memory relevant to `query`. With
   * a session, episodic hits come from that session only.
   */
  async search(
    query: string,
    options: { topK?: number; types?: MemoryType[]; expandContext?: number } = {},
  ): Promise<SearchResponse> {
    return this.client.request("search_memories", {
      body: {
        ...this.wireIds(),
        session_id: this.sessionId,
        query,
        top_k: options.topK,
        types: options.types,
        expand_context: options.expandContext,
      },
      idempotent: true,
    });
  }

  /** A page of the stored episodes (of the session, when the handle has one). */
  async episodes(
    options: { limit?: number; offset?: number; newestFirst?: boolean } = {},
  ): Promise<EpisodeListResponse> {
    return this.client.request("list_memories", {
      query: {
        ...this.wireIds(),
        session_id: this.sessionId,
        limit: options.limit,
        offset: options.offset,
        order: options.newestFirst ? "newest" : "oldest",
      },
    });
  }

  /**
   * The messages for the next LLM call: what memory knows that is relevant to `query`
   * (profile, episodes, and with a session its summary and newest messages), then `query`
   * itself, within `maxTokens`, in `format` (openai, anthropic or gemini).
   */
  async prompt(
    query: string,
    options: {
      maxTokens?: number;
      format?: PromptFormat;
      topK?: number;
      recentMessages?: number;
    } = {},
  ): Promise<MemoryPromptResponse> {
    return this.client.request("memory_prompt", {
      body: {
        ...this.wireIds(),
        session_id: this.sessionId,
        query,
        max_tokens: options.maxTokens,
        format: options.format,
        top_k: options.topK,
        recent_messages: options.recentMessages,
      },
      idempotent: true,
    });
  }

  /**
   * Delete the session (its episodes, working memory and the facts sourced from it) when
   * the handle has one; otherwise everything stored for the user, across all agents,
   * groups and sessions.
   */
  async forget(): Promise<ForgetResponse> {
    if (this.sessionId !== null) {
      return this.client.request("forget_session", {
        path: { session_id: this.sessionId },
        query: this.wireIds(),
      });
    }
    const { user_id: userId, ...rest } = this.wireIds();
    return this.client.request("forget_user", { path: { user_id: userId }, query: rest });
  }

  toString(): string {
    return `Memory(userId=${this.userId}, sessionId=${this.sessionId})`;
  }
}

/** The user's profile facts (one value per `(tag, feature)`); `memory.profile`. */
export class Profile {
  constructor(private readonly memory: Memory) {}

  /** The current facts, all or those with `tag` (and `feature`). */
  async get(options: { tag?: string; feature?: string } = {}): Promise<FactOut[]> {
    const answer = await this.memory.client.request("get_profile", {
      query: { ...this.memory.wireIds(), tag: options.tag, feature: options.feature },
    });
    return answer.facts;
  }

  /**
   * Set one fact or several (`{tag, feature, value}`); a fact replaces the value for its
   * `(tag, feature)`, keeping the old one in its history. With a session, the facts
   * record it as their source.
   */
  async set(facts: FactIn | FactIn[]): Promise<FactOut[]> {
    const answer = await this.memory.client.request("set_profile", {
      body: {
        ...this.memory.wireIds(),
        session_id: this.memory.sessionId,
        facts: Array.isArray(facts) ? facts : [facts],
      },
    });
    return answer.facts;
  }

  /** Facts relevant to `query`, best first. */
  async search(query: string, options: { topK?: number } = {}): Promise<FactOut[]> {
    const answer = await this.memory.client.request("search_profile", {
      body: { ...this.memory.wireIds(), query, top_k: options.topK },
      idempotent: true,
    });
    return answer.facts;
  }

  /** The current fact for `(tag, feature)` and its closed versions, oldest first. */
  async history(tag: string, feature: string): Promise<ProfileHistoryResponse> {
    return this.memory.client.request("get_profile_history", {
      query: { ...this.memory.wireIds(), tag, feature },
    });
  }

  /** Delete the facts with `tag` (and `feature`), or all; resolves to how many. */
  async delete(options: { tag?: string; feature?: string } = {}): Promise<number> {
    const answer = await this.memory.client.request("delete_facts", {
      query: { ...this.memory.wireIds(), tag: options.tag, feature: options.feature },
    });
    return answer.deleted;
  }

  /** Delete one fact by id (`NotFoundError` if the user has no such fact). */
  async deleteFact(factId: string): Promise<void> {
    await this.memory.client.request("delete_fact", {
      path: { fact_id: factId },
      query: this.memory.wireIds(),
    });
  }
}

/**
 * The session's working-memory state, a JSON object with a version; `memory.state`.
 * Every method needs a handle with a `sessionId`.
 */
export class State {
  constructor(private readonly memory: Memory) {}

  /** The state now (`{}` and version 0 for a session never written). */
  async get(): Promise<SessionState> {
    const working = await this.memory.client.request("get_working", {
      path: { session_id: this.memory.session("state.get") },
      query: { ...this.memory.wireIds(), last_n: 0 },
    });
    return sessionStateOf(working);
  }

  /**
   * Replace the state (messages and summary stay). With `expectedVersion` the write
   * happens only if the session is still at that version, else `ConflictError` with
   * `currentVersion`; such a write is not repeated after an ambiguous failure.
   */
  async set(
    value: Record<string, unknown>,
    options: { expectedVersion?: number } = {},
  ): Promise<SessionState> {
    const working = await this.memory.client.request("put_working", {
      path: { session_id: this.memory.session("state.set") },
      body: { ...this.memory.wireIds(), state: value, expected_version: options.expectedVersion },
      idempotent: options.expectedVersion === undefined,
    });
    return sessionStateOf(working);
  }
}
