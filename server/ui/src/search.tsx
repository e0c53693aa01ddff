// The search playground: the real search, as an agent would run it, with one or two
// settings side by side and the latency the browser measured.
import type { ComponentChildren } from "preact";
import { useState } from "preact/hooks";
import { api, type Episode, type SearchResult } from "./api";
import { recordLatency } from "./latency";
import { href } from "./route";
import { describe, ErrorNote, Time } from "./ui";

interface Settings {
  top_k: number;
  types: string[];
  expand_context: number;
}

const DEFAULTS: Settings = { top_k: 10, types: ["episodic", "profile", "working"], expand_context: 0 };

interface Outcome {
  result: SearchResult | null;
  error: string | null;
  ms: number;
}

/**
 * The columns of a hit. A column per retrieval stage (which stages found the hit and what
 * each took) is added here once the search reports them; `signals` shows the per-signal
 * ranks the search already returns.
 */
export const HIT_COLUMNS: { header: string; cell: (hit: Episode, rank: number) => ComponentChildren }[] = [
  { header: "#", cell: (_, rank) => rank },
  {
    header: "score",
    cell: (hit) => (
      <>
        <meter min={0} max={1} value={hit.score ?? 0} aria-hidden="true" /> {(hit.score ?? 0).toFixed(3)}
      </>
    ),
  },
  {
    header: "signals",
    cell: (hit) =>
      hit.context ? (
        <span class="muted">context</span>
      ) : (
        Object.entries(hit.ranks ?? {}).map(([signal, rank]) => (
          <span key={signal} class="signal">
            {signal} #{rank}
          </span>
        ))
      ),
  },
  {
    header: "episode",
    cell: (hit) => (
      <>
        <strong>{hit.producer ?? hit.role}</strong>: {hit.content}
        <div class="muted">
          <a href={href(`/users/${encodeURIComponent(hit.user_id)}/episodes/${encodeURIComponent(hit.id)}`)}>
            {hit.session_id} #{hit.sequence}
          </a>{" "}
          <Time value={hit.timestamp} />
        </div>
      </>
    ),
  },
];

export function SearchView({ user: initialUser }: { user: string }) {
  const [compare, setCompare] = useState(false);
  const [a, setA] = useState<Settings>(DEFAULTS);
  const [b, setB] = useState<Settings>({ ...DEFAULTS, top_k: 5, expand_context: 1 });
  const [outcomes, setOutcomes] = useState<Outcome[]>([]);
  const [busy, setBusy] = useState(false);
  return (
    <section>
      <h1 tabIndex={-1}>Search playground</h1>
      <form
        class="search-form"
        role="search"
        onSubmit={async (event) => {
          event.preventDefault();
          const form = new FormData(event.currentTarget);
          const base = {
            user_id: String(form.get("user_id")),
            session_id: String(form.get("session_id") || "") || undefined,
            query: String(form.get("query")),
          };
          setBusy(true);
          const runs = compare ? [a, b] : [a];
          const results: Outcome[] = [];
          for (const settings of runs) {
            const started = performance.now();
            try {
              const result = await api.search({ ...base, ...settings });
              const ms = performance.now() - started;
              recordLatency(ms);
              results.push({ result, error: null, ms });
            } catch (e) {
              results.push({ result: null, error: describe(e), ms: performance.now() - started });
            }
          }
          setOutcomes(results);
          setBusy(false);
        }}
      >
        <label>
          User <input name="user_id" required defaultValue={initialUser} />
        </label>
        <label>
          Session (optional) <input name="session_id" />
        </label>
        <label class="wide">
          Query <input name="query" required size={50} />
        </label>
        <fieldset class="settings-row">
          <legend>Settings</legend>
          <SettingsForm name="A" value={a} onChange={setA} />
          {compare && <SettingsForm name="B" value={b} onChange={setB} />}
        </fieldset>
        <label>
          <input type="checkbox" checked={compare} onChange={(e) => setCompare(e.currentTarget.checked)} /> Compare two
          settings side by side
        </label>
        <button type="submit" disabled={busy}>
          {busy ? "Searching…" : "Search"}
        </button>
      </form>
      <div class={`results${outcomes.length > 1 ? " side-by-side" : ""}`}>
        {outcomes.map((outcome, i) => (
          <Results key={i} name={outcomes.length > 1 ? ["A", "B"][i] : ""} outcome={outcome} />
        ))}
      </div>
    </section>
  );
}

function SettingsForm({ name, value, onChange }: { name: string; value: Settings; onChange: (s: Settings) => void }) {
  return (
    <fieldset class="settings">
      <legend>Settings {name}</legend>
      <label>
        top_k{" "}
        <input
          type="number"
          min="1"
          max="100"
          value={value.top_k}
          onInput={(e) => onChange({ ...value, top_k: Number(e.currentTarget.value) })}
        />
      </label>
      <label>
        expand_context{" "}
        <input
          type="number"
          min="0"
          max="10"
          value={value.expand_context}
          onInput={(e) => onChange({ ...value, expand_context: Number(e.currentTarget.value) })}
        />
      </label>
      {["episodic", "profile", "working"].map((type) => (
        <label key={type}>
          <input
            type="checkbox"
            checked={value.types.includes(type)}
            onChange={(e) =>
              onChange({
                ...value,
                types: e.currentTarget.checked
                  ? [...value.types, type]
                  : value.types.filter((t) => t !== type),
              })
            }
          />{" "}
          {type}
        </label>
      ))}
    </fieldset>
  );
}

function Results({ name, outcome }: { name: string; outcome: Outcome }) {
  const title = name ? `Results ${name}` : "Results";
  return (
    <div class="result-set" aria-label={title}>
      <h2>
        {title} <span class="muted">({outcome.ms.toFixed(0)} ms in the browser)</span>
      </h2>
      {outcome.error && <ErrorNote message={outcome.error} />}
      {outcome.result && (
        <>
          <table class="hits">
            <caption>{outcome.result.episodic.length} episodes</caption>
            <thead>
              <tr>
                {HIT_COLUMNS.map((c) => (
                  <th key={c.header} scope="col">
                    {c.header}
                  </th>
                ))}
              </tr>
            </thead>
            <tbody>
              {outcome.result.episodic.map((hit, i) => (
                <tr key={hit.id} class={hit.context ? "context" : ""}>
                  {HIT_COLUMNS.map((c) => (
                    <td key={c.header}>{c.cell(hit, i + 1)}</td>
                  ))}
                </tr>
              ))}
            </tbody>
          </table>
          {outcome.result.profile.length > 0 && (
            <>
              <h3>Profile facts</h3>
              <ul>
                {outcome.result.profile.map((fact) => (
                  <li key={fact.id}>
                    {fact.tag} / {fact.feature}: <strong>{fact.value}</strong>{" "}
                    <span class="muted">score {(fact.score ?? 0).toFixed(3)}</span>
                  </li>
                ))}
              </ul>
            </>
          )}
          {outcome.result.working && (
            <p class="muted">
              Working memory: {outcome.result.working.messages.length} recent messages of session{" "}
              {outcome.result.working.session_id}.
            </p>
          )}
        </>
      )}
    </div>
  );
}
