// The search playground: the real search, as an agent would run it, with one or two
// settings side by side, the latency the browser measured and, from the search's own
// explanation, the time of each retrieval stage and how the stages found and moved each hit.
// Stages can be switched off for one search (sent as `stages_off`; nothing is kept).
import type { ComponentChildren } from "preact";
import { useState } from "preact/hooks";
import { api, type Episode, type HitStep, type SearchResult, type StageRun } from "./api";
import { recordLatency } from "./latency";
import { href } from "./route";
import { describe, ErrorNote, Time } from "./ui";

interface Settings {
  top_k: number;
  types: string[];
  expand_context: number;
  /** Retrieval stages this search skips. */
  stages_off: string[];
}

const DEFAULTS: Settings = {
  top_k: 10,
  types: ["episodic", "profile", "working"],
  expand_context: 0,
  stages_off: [],
};

interface Outcome {
  result: SearchResult | null;
  error: string | null;
  ms: number;
}

/** What a stage did to a hit, in a few characters; null when it only rescaled its score. */
function stepText(step: HitStep): string | null {
  if (step.rank_before === null && step.rank_after !== null) return `in at #${step.rank_after}`;
  if (step.rank_after === null) return "cut";
  if (step.boost !== null) return `×${step.boost.toFixed(2)}`;
  if (step.rank_before !== step.rank_after) return `#${step.rank_before} → #${step.rank_after}`;
  return null;
}

/**
 * The columns of a hit: its score, the rank each signal gave it, which signals found it
 * and at which stage it entered, and what each stage did to it (from `explain`).
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
    header: "found by",
    cell: (hit) =>
      hit.explain && (
        <>
          {hit.explain.sources.map((source) => (
            <span key={source} class={`source source-${source}`}>
              {source}
            </span>
          ))}
          <div class="muted">entered at {hit.explain.entered}</div>
        </>
      ),
  },
  {
    header: "stages",
    cell: (hit) =>
      hit.explain && (
        <ol class="steps">
          {hit.explain.steps.map((step, i) => {
            const text = stepText(step);
            return text === null ? null : (
              <li key={i} title={`score ${fmt(step.score_before)} → ${fmt(step.score_after)}`}>
                <span class="step-stage">{step.stage}</span> {text}
              </li>
            );
          })}
        </ol>
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
  const [stages, setStages] = useState<StageRun[]>([]);
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
              const result = await api.search({ ...base, ...settings, explain: true });
              const ms = performance.now() - started;
              recordLatency(ms);
              results.push({ result, error: null, ms });
            } catch (e) {
              results.push({ result: null, error: describe(e), ms: performance.now() - started });
            }
          }
          setOutcomes(results);
          const explained = results.find((outcome) => outcome.result?.explain)?.result?.explain;
          if (explained) setStages(explained.stages);
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
          <SettingsForm name="A" value={a} onChange={setA} stages={stages} />
          {compare && <SettingsForm name="B" value={b} onChange={setB} stages={stages} />}
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

function SettingsForm({
  name,
  value,
  onChange,
  stages,
}: {
  name: string;
  value: Settings;
  onChange: (s: Settings) => void;
  stages: StageRun[];
}) {
  const switchable = stages.filter((stage) => stage.switchable);
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
      <fieldset class="stage-toggles">
        <legend>Stages {name}</legend>
        {switchable.length === 0 && <span class="muted">Run a search to list its stages.</span>}
        {switchable.map((stage) => (
          <label key={stage.name}>
            <input
              type="checkbox"
              checked={!value.stages_off.includes(stage.name)}
              onChange={(e) =>
                onChange({
                  ...value,
                  stages_off: e.currentTarget.checked
                    ? value.stages_off.filter((off) => off !== stage.name)
                    : [...value.stages_off, stage.name],
                })
              }
            />{" "}
            {stage.name}
          </label>
        ))}
      </fieldset>
    </fieldset>
  );
}

function fmt(score: number | null): string {
  return score === null ? "–" : score.toFixed(3);
}

/** Each stage of one search, whether it ran, and its time as the server measured it. */
function StageTimes({ stages }: { stages: StageRun[] }) {
  const slowest = Math.max(...stages.map((stage) => stage.seconds), 1e-9);
  return (
    <table class="stage-times">
      <caption>Stage latency</caption>
      <thead>
        <tr>
          <th scope="col">stage</th>
          <th scope="col">ran</th>
          <th scope="col">ms</th>
        </tr>
      </thead>
      <tbody>
        {stages.map((stage) => (
          <tr key={stage.name} class={stage.ran ? "" : "idle"}>
            <th scope="row">{stage.name}</th>
            <td>{stage.ran ? "yes" : stage.switched_off ? "switched off" : "nothing to do"}</td>
            <td>
              <meter min={0} max={slowest} value={stage.seconds} aria-hidden="true" />{" "}
              {(stage.seconds * 1000).toFixed(2)}
            </td>
          </tr>
        ))}
      </tbody>
    </table>
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
          {outcome.result.explain && <StageTimes stages={outcome.result.explain.stages} />}
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
