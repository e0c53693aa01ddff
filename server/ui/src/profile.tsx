// A user's profile: facts with confidence, source, provenance and validity; edit a value,
// invalidate with a reason, read a fact's history.
import { useState } from "preact/hooks";
import { api, type Fact, type History, type Me } from "./api";
import { BarChart, histogram } from "./charts";
import { href } from "./route";
import { describe, ErrorNote, plural, Status, Time, useLoad } from "./ui";

export function ProfileView({ user, me }: { user: string; me: Me }) {
  const facts = useLoad(() => api.facts(user), [user]);
  const [open, setOpen] = useState<string | null>(null);
  const [closed, setClosed] = useState<{ fact: Fact; history: History } | null>(null);
  return (
    <section>
      <h1 tabIndex={-1}>Profile of {user}</h1>
      <Status loaded={facts} />
      {facts.data && (
        <>
          <table class="facts">
            <caption>{plural(facts.data.facts.length, "current fact")}</caption>
            <thead>
              <tr>
                <th scope="col">tag</th>
                <th scope="col">feature</th>
                <th scope="col">value</th>
                <th scope="col" class="num">confidence (now)</th>
                <th scope="col">source</th>
                <th scope="col">from episodes</th>
                <th scope="col">valid since</th>
                <th scope="col">
                  <span class="visually-hidden">actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {facts.data.facts.map((fact) => (
                <FactRow
                  key={fact.id}
                  fact={fact}
                  user={user}
                  me={me}
                  open={open === fact.id}
                  onToggle={() => setOpen(open === fact.id ? null : fact.id)}
                  onChanged={facts.reload}
                  onInvalidated={(history) => {
                    setClosed({ fact, history });
                    setOpen(null);
                    facts.reload();
                  }}
                />
              ))}
            </tbody>
          </table>
          {closed && (
            <div class="invalidated" role="status">
              <h2>
                Invalidated: {closed.fact.tag} / {closed.fact.feature}
              </h2>
              <p>It no longer appears in the profile or in searches; its history stays.</p>
              <HistoryTable history={closed.history} />
            </div>
          )}
          <BarChart
            id="confidence"
            title="Fact confidence (now, after ageing)"
            unit="facts"
            bars={histogram(
              facts.data.facts.map((f) => f.effective_confidence ?? f.confidence),
              0,
              1,
              10,
            )}
          />
        </>
      )}
    </section>
  );
}

function FactRow(props: {
  fact: Fact;
  user: string;
  me: Me;
  open: boolean;
  onToggle: () => void;
  onChanged: () => void;
  onInvalidated: (history: History) => void;
}) {
  const { fact, user } = props;
  const label = `${fact.tag} / ${fact.feature}`;
  return (
    <>
      <tr>
        <td>{fact.tag}</td>
        <td>{fact.feature}</td>
        <td class="value">{fact.value}</td>
        <td class="num">
          {fact.confidence.toFixed(2)}
          {fact.effective_confidence !== null && ` (${fact.effective_confidence.toFixed(2)})`}
        </td>
        <td>{fact.source}</td>
        <td>
          {fact.source_episode_ids.length === 0 ? (
            <span class="muted">none</span>
          ) : (
            fact.source_episode_ids.map((id) => (
              <a key={id} class="episode-link" href={href(`/users/${encodeURIComponent(user)}/episodes/${encodeURIComponent(id)}`)}>
                {id.slice(0, 8)}
              </a>
            ))
          )}
          {fact.source_session_id && <span class="muted"> in {fact.source_session_id}</span>}
        </td>
        <td>
          <Time value={fact.valid_from ?? fact.created_at} />
        </td>
        <td>
          <button type="button" aria-expanded={props.open} onClick={props.onToggle}>
            {props.me.can_write ? "Edit / history" : "History"}
            <span class="visually-hidden"> of {label}</span>
          </button>
        </td>
      </tr>
      {props.open && (
        <tr class="detail">
          <td colSpan={8}>
            <FactDetail
              fact={fact}
              user={user}
              me={props.me}
              onChanged={props.onChanged}
              onInvalidated={props.onInvalidated}
            />
          </td>
        </tr>
      )}
    </>
  );
}

function FactDetail(props: {
  fact: Fact;
  user: string;
  me: Me;
  onChanged: () => void;
  onInvalidated: (history: History) => void;
}) {
  const { fact, user } = props;
  const [round, setRound] = useState(0);
  const history = useLoad(() => api.history(user, fact.tag, fact.feature), [fact.id, round]);
  const [error, setError] = useState<string | null>(null);
  return (
    <div class="fact-detail">
      {props.me.can_write && (
        <div class="fact-forms">
          <form
            aria-label={`edit ${fact.tag} / ${fact.feature}`}
            onSubmit={async (event) => {
              event.preventDefault();
              const form = new FormData(event.currentTarget);
              try {
                await api.setFact(user, {
                  tag: fact.tag,
                  feature: fact.feature,
                  value: String(form.get("value")),
                  confidence: Number(form.get("confidence")),
                  source: fact.source,
                  metadata: fact.metadata,
                });
                setRound(round + 1);
                props.onChanged();
              } catch (e) {
                setError(describe(e));
              }
            }}
          >
            <label>
              New value <input name="value" defaultValue={fact.value} required />
            </label>
            <label>
              Confidence{" "}
              <input name="confidence" type="number" min="0" max="1" step="0.05" defaultValue={String(fact.confidence)} />
            </label>
            <button type="submit">Save value</button>
          </form>
          <form
            aria-label={`invalidate ${fact.tag} / ${fact.feature}`}
            onSubmit={async (event) => {
              event.preventDefault();
              const form = new FormData(event.currentTarget);
              try {
                props.onInvalidated(await api.invalidate(user, fact.id, String(form.get("reason"))));
              } catch (e) {
                setError(describe(e));
              }
            }}
          >
            <label>
              Reason <input name="reason" required placeholder="no longer true" />
            </label>
            <button type="submit" class="danger">
              Invalidate
            </button>
          </form>
        </div>
      )}
      {error && <ErrorNote message={error} />}
      <h3>History of {fact.tag} / {fact.feature}</h3>
      <Status loaded={history} />
      {history.data && <HistoryTable history={history.data} />}
    </div>
  );
}

function HistoryTable({ history }: { history: History }) {
  return (
    <table class="history">
      <thead>
        <tr>
          <th scope="col">value</th>
          <th scope="col" class="num">confidence</th>
          <th scope="col">source</th>
          <th scope="col">valid from</th>
          <th scope="col">valid to</th>
          <th scope="col">why it ended</th>
        </tr>
      </thead>
      <tbody>
        {history.current && (
          <tr>
            <td>{history.current.value}</td>
            <td class="num">{history.current.confidence.toFixed(2)}</td>
            <td>{history.current.source}</td>
            <td><Time value={history.current.valid_from ?? history.current.created_at} /></td>
            <td>current</td>
            <td>–</td>
          </tr>
        )}
        {[...history.history].reverse().map((v) => (
          <tr key={`${v.valid_to}-${v.value}`}>
            <td>{v.value}</td>
            <td class="num">{v.confidence.toFixed(2)}</td>
            <td>{v.source}</td>
            <td><Time value={v.valid_from} /></td>
            <td><Time value={v.valid_to} /></td>
            <td>{v.reason}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}
