// A session's working memory (state, summary, recent messages) and the exact memory prompt
// the next model call would get, per provider format, with its token count.
import { useState } from "preact/hooks";
import { api, type PromptResult } from "./api";
import { go } from "./route";
import { describe, ErrorNote, Json, plural, Status, Time, useLoad } from "./ui";

export function PromptView({ user, session }: { user: string; session: string }) {
  const sessions = useLoad(() => api.sessions(user, 100, 0), [user]);
  const working = useLoad(
    () => (session ? api.working(user, session, 20) : Promise.resolve(null)),
    [user, session],
  );
  const [result, setResult] = useState<PromptResult | null>(null);
  const [error, setError] = useState<string | null>(null);
  const known = new Set([
    ...(sessions.data?.working.map((w) => w.session_id) ?? []),
    ...(sessions.data?.sessions.map((s) => s.session_id) ?? []),
  ]);
  const w = working.data;
  const dropped = Object.entries(result?.dropped ?? {}).filter(([, n]) => n > 0);
  return (
    <section>
      <h1 tabIndex={-1}>Working memory and prompt of {user}</h1>
      <label>
        Session{" "}
        <select
          value={session}
          onChange={(event) =>
            go(`/users/${encodeURIComponent(user)}/prompt?session=${encodeURIComponent(event.currentTarget.value)}`)
          }
        >
          <option value="">(none: profile and episodes only)</option>
          {[...known].sort().map((id) => (
            <option key={id} value={id}>
              {id}
            </option>
          ))}
        </select>
      </label>
      <Status loaded={working} />
      {w && (
        <div class="working">
          <h2>Working memory of session {session}</h2>
          <p>
            Version {w.version}, {plural(w.message_count, "message")}, updated <Time value={w.updated_at} />
            {w.ttl_seconds !== null && `, expires in ${w.ttl_seconds} s`}.
          </p>
          <h3>Summary</h3>
          <p class="summary">{w.summary || <span class="muted">no summary yet</span>}</p>
          <h3>State</h3>
          <pre tabIndex={0} class="state">{JSON.stringify(w.state, null, 2)}</pre>
          <h3>Recent messages</h3>
          <ol class="messages" start={w.first_index + 1}>
            {w.messages.map((m, i) => (
              <li key={i}>
                <strong>{m.producer ?? m.role}</strong> <Time value={m.timestamp} />: {m.content}
              </li>
            ))}
          </ol>
        </div>
      )}
      <h2>Memory prompt</h2>
      <form
        class="prompt-form"
        onSubmit={async (event) => {
          event.preventDefault();
          const form = new FormData(event.currentTarget);
          setError(null);
          try {
            setResult(
              await api.prompt({
                user_id: user,
                session_id: session || undefined,
                query: String(form.get("query")),
                format: String(form.get("format")),
                max_tokens: Number(form.get("max_tokens")),
              }),
            );
          } catch (e) {
            setError(describe(e));
          }
        }}
      >
        <label>
          Next message <input name="query" required size={50} />
        </label>
        <label>
          Format{" "}
          <select name="format">
            <option value="openai">OpenAI</option>
            <option value="anthropic">Anthropic</option>
            <option value="gemini">Gemini</option>
          </select>
        </label>
        <label>
          Token budget <input name="max_tokens" type="number" min="1" defaultValue="2000" />
        </label>
        <button type="submit">Build prompt</button>
      </form>
      {error && <ErrorNote message={error} />}
      {result && (
        <div class="prompt-result">
          <p>
            <meter min={0} max={result.max_tokens} value={result.token_count} aria-label="tokens used" />{" "}
            <strong>{result.token_count}</strong> of {result.max_tokens} tokens ({result.format}):{" "}
            {plural(result.fact_ids.length, "fact")}, {plural(result.episode_ids.length, "episode")},{" "}
            {plural(result.message_count, "message")}
            {result.summary_included ? ", the summary" : ""}
            {dropped.length > 0 && `; left out for the budget: ${dropped.map(([k, n]) => `${n} ${k}`).join(", ")}`}
          </p>
          <pre tabIndex={0} class="prompt-json" aria-label="the exact memory-prompt output">
            {JSON.stringify({ messages: result.messages, ...result.body }, null, 2)}
          </pre>
          <Json value={result} label="full response" />
        </div>
      )}
    </section>
  );
}
