// The project's procedures (the application's, shared by its users): listed or searched
// by task, with confidence and use counts; one procedure with its steps and the versions
// it superseded.
import { useState } from "preact/hooks";
import { api, type Procedure, type ProcedureHit } from "./api";
import { href } from "./route";
import { describe, ErrorNote, Status, Time, useLoad } from "./ui";

function Confidence({ value }: { value: number }) {
  return <span class="num">{value.toFixed(2)}</span>;
}

function Rows({ hits }: { hits: ProcedureHit[] }) {
  const scored = hits.some((hit) => hit.score !== null);
  return (
    <table aria-label="procedures">
      <thead>
        <tr>
          {scored && <th scope="col" class="num">score</th>}
          <th scope="col">goal</th>
          <th scope="col">agent</th>
          <th scope="col" class="num">confidence</th>
          <th scope="col" class="num">worked</th>
          <th scope="col" class="num">failed</th>
          <th scope="col" class="num">version</th>
          <th scope="col">updated</th>
        </tr>
      </thead>
      <tbody>
        {hits.map(({ procedure: p, score }) => (
          <tr key={p.id}>
            {scored && <td class="num">{score?.toFixed(3)}</td>}
            <th scope="row">
              <a href={href(`/procedures/${encodeURIComponent(p.id)}`)}>{p.goal}</a>
            </th>
            <td>{p.agent_id ?? "shared"}</td>
            <td class="num"><Confidence value={p.confidence} /></td>
            <td class="num">{p.successes}</td>
            <td class="num">{p.failures}</td>
            <td class="num">{p.version}</td>
            <td><Time value={p.updated_at} /></td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

export function ProceduresView() {
  const listed = useLoad(() => api.procedures(), []);
  const [query, setQuery] = useState("");
  const [hits, setHits] = useState<ProcedureHit[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const all = (listed.data?.procedures ?? []).map((procedure) => ({ procedure, score: null }));
  return (
    <section>
      <h1 tabIndex={-1}>Procedures</h1>
      <p class="muted">
        How this project's agents get tasks done, shared by every user of the project.
      </p>
      <form
        role="search"
        onSubmit={async (event) => {
          event.preventDefault();
          if (!query.trim()) {
            setHits(null);
            return;
          }
          try {
            const found = await api.searchProcedures(query.trim());
            setHits(found.hits);
            setError(null);
          } catch (e) {
            setError(describe(e));
          }
        }}
      >
        <label>
          Task{" "}
          <input
            name="query"
            value={query}
            onInput={(event) => setQuery(event.currentTarget.value)}
            placeholder="describe the task"
          />
        </label>
        <button type="submit">Search procedures</button>
        {hits && (
          <button type="button" onClick={() => setHits(null)}>
            Show all
          </button>
        )}
      </form>
      {error && <ErrorNote message={error} />}
      {hits ? (
        hits.length ? <Rows hits={hits} /> : <p class="muted">No procedure matches this task.</p>
      ) : (
        <>
          <Status loaded={listed} />
          {listed.data && (all.length ? <Rows hits={all} /> : <p class="muted">No procedures yet.</p>)}
        </>
      )}
    </section>
  );
}

function Steps({ title, items, ordered }: { title: string; items: string[]; ordered?: boolean }) {
  if (!items.length) return null;
  const list = items.map((item, index) => <li key={index}>{item}</li>);
  return (
    <>
      <h3>{title}</h3>
      {ordered ? <ol>{list}</ol> : <ul>{list}</ul>}
    </>
  );
}

export function ProcedureView({ id }: { id: string }) {
  const loaded = useLoad(() => api.procedureHistory(id), [id]);
  const current: Procedure | undefined = loaded.data?.current;
  return (
    <section>
      <h1 tabIndex={-1}>{current ? current.goal : "Procedure"}</h1>
      <p>
        <a href={href("/procedures")}>All procedures</a>
      </p>
      <Status loaded={loaded} />
      {current && loaded.data && (
        <>
          <dl class="counts">
            <div><dt>confidence</dt><dd>{current.confidence.toFixed(2)}</dd></div>
            <div><dt>worked</dt><dd>{current.successes}</dd></div>
            <div><dt>failed</dt><dd>{current.failures}</dd></div>
            <div><dt>version</dt><dd>{current.version}</dd></div>
            <div><dt>agent</dt><dd>{current.agent_id ?? "shared"}</dd></div>
            <div><dt>source</dt><dd>{current.source}</dd></div>
          </dl>
          <Steps title="Preconditions" items={current.preconditions} />
          <Steps title="Steps" items={current.steps} ordered />
          <Steps title="Pitfalls" items={current.pitfalls} />
          <p class="muted">
            Learnt from {current.source_session_ids.length} session(s) · created{" "}
            <Time value={current.created_at} /> · updated <Time value={current.updated_at} />
          </p>
          <h2>History</h2>
          {loaded.data.history.length === 0 ? (
            <p class="muted">No earlier versions.</p>
          ) : (
            <table aria-label="earlier versions">
              <thead>
                <tr>
                  <th scope="col">valid</th>
                  <th scope="col">steps</th>
                  <th scope="col" class="num">confidence</th>
                  <th scope="col" class="num">worked</th>
                  <th scope="col" class="num">failed</th>
                  <th scope="col">why it ended</th>
                </tr>
              </thead>
              <tbody>
                {loaded.data.history.map((old, index) => (
                  <tr key={index}>
                    <td>
                      <Time value={old.valid_from} /> – <Time value={old.valid_to} />
                    </td>
                    <td>{old.steps.join(" → ")}</td>
                    <td class="num"><Confidence value={old.confidence} /></td>
                    <td class="num">{old.successes}</td>
                    <td class="num">{old.failures}</td>
                    <td>{old.reason}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          )}
        </>
      )}
    </section>
  );
}
