// Users of the project, one user's overview (sessions, counts, forget) and a session's
// timeline of episodes with its working memory.
import { useState } from "preact/hooks";
import { api, type Episode, type Me } from "./api";
import { Confirm, describe, ErrorNote, Json, Marks, plural, Status, Time, useLoad } from "./ui";
import { href, go } from "./route";

export function UsersView() {
  const [prefix, setPrefix] = useState("");
  const [pages, setPages] = useState<(string | null)[]>([null]);
  const after = pages[pages.length - 1];
  const loaded = useLoad(() => api.users({ prefix, after, limit: 25 }), [prefix, after]);
  return (
    <section>
      <h1 tabIndex={-1}>Users</h1>
      <form
        class="inline"
        role="search"
        onSubmit={(event) => {
          event.preventDefault();
          const data = new FormData(event.currentTarget);
          setPrefix(String(data.get("prefix") ?? ""));
          setPages([null]);
        }}
      >
        <label>
          User id starts with <input name="prefix" defaultValue={prefix} autoComplete="off" />
        </label>
        <button type="submit">Find</button>
      </form>
      <Status loaded={loaded} />
      {loaded.data && (
        <>
          <table>
            <caption>
              {plural(loaded.data.users.length, "user")} on this page (page {pages.length})
            </caption>
            <thead>
              <tr>
                <th scope="col">user</th>
                <th scope="col" class="num">episodes</th>
                <th scope="col" class="num">sessions</th>
                <th scope="col" class="num">facts</th>
                <th scope="col" class="num">live working sessions</th>
                <th scope="col">last activity</th>
              </tr>
            </thead>
            <tbody>
              {loaded.data.users.map((user) => (
                <tr key={user.user_id}>
                  <th scope="row">
                    <a href={href(`/users/${encodeURIComponent(user.user_id)}`)}>{user.user_id}</a>
                  </th>
                  <td class="num">{user.episodes}</td>
                  <td class="num">{user.sessions}</td>
                  <td class="num">{user.facts}</td>
                  <td class="num">{user.working_sessions}</td>
                  <td>
                    <Time value={user.last_active} />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
          <nav class="pager" aria-label="user pages">
            <button type="button" disabled={pages.length < 2} onClick={() => setPages(pages.slice(0, -1))}>
              Previous page
            </button>
            <button
              type="button"
              disabled={!loaded.data.next_after}
              onClick={() => setPages([...pages, loaded.data?.next_after ?? null])}
            >
              Next page
            </button>
          </nav>
        </>
      )}
    </section>
  );
}

export function UserView({ user, me }: { user: string; me: Me }) {
  const [offset, setOffset] = useState(0);
  const limit = 20;
  const summary = useLoad(() => api.user(user), [user]);
  const sessions = useLoad(() => api.sessions(user, limit, offset), [user, offset]);
  const [forgetting, setForgetting] = useState(false);
  return (
    <section>
      <h1 tabIndex={-1}>User {user}</h1>
      <Status loaded={summary} />
      {summary.data && (
        <dl class="counts">
          <div><dt>episodes</dt><dd>{summary.data.episodes}</dd></div>
          <div><dt>sessions</dt><dd>{summary.data.sessions}</dd></div>
          <div><dt>facts</dt><dd>{summary.data.facts}</dd></div>
          <div><dt>live working sessions</dt><dd>{summary.data.working_sessions}</dd></div>
          <div><dt>last activity</dt><dd><Time value={summary.data.last_active} /></dd></div>
        </dl>
      )}
      <h2>Sessions with episodes</h2>
      <Status loaded={sessions} />
      {sessions.data && (
        <>
          <table>
            <thead>
              <tr>
                <th scope="col">session</th>
                <th scope="col" class="num">episodes</th>
                <th scope="col">first episode</th>
                <th scope="col">last episode</th>
                <th scope="col">last written</th>
              </tr>
            </thead>
            <tbody>
              {sessions.data.sessions.map((s) => (
                <tr key={s.session_id}>
                  <th scope="row">
                    <a href={href(`/users/${encodeURIComponent(user)}/sessions/${encodeURIComponent(s.session_id)}`)}>
                      {s.session_id}
                    </a>
                  </th>
                  <td class="num">{s.episodes}</td>
                  <td><Time value={s.first_at} /></td>
                  <td><Time value={s.last_at} /></td>
                  <td><Time value={s.updated_at} /></td>
                </tr>
              ))}
            </tbody>
          </table>
          <nav class="pager" aria-label="session pages">
            <button type="button" disabled={offset === 0} onClick={() => setOffset(Math.max(0, offset - limit))}>
              Previous sessions
            </button>
            <button type="button" disabled={sessions.data.sessions.length < limit} onClick={() => setOffset(offset + limit)}>
              More sessions
            </button>
          </nav>
          <h2>Live working memory</h2>
          {sessions.data.working.length === 0 ? (
            <p class="muted">No session of this user has working memory now.</p>
          ) : (
            <ul>
              {sessions.data.working.map((w) => (
                <li key={w.session_id}>
                  <a href={href(`/users/${encodeURIComponent(user)}/prompt?session=${encodeURIComponent(w.session_id)}`)}>
                    {w.session_id}
                  </a>{" "}
                  — {plural(w.message_count, "message")}, version {w.version}
                  {w.ttl_seconds !== null && `, expires in ${w.ttl_seconds} s`}
                </li>
              ))}
            </ul>
          )}
        </>
      )}
      {me.can_write && (
        <>
          <h2>Forget</h2>
          <button type="button" class="danger" onClick={() => setForgetting(true)}>
            Forget user {user}…
          </button>
          <ForgetDialog
            open={forgetting}
            user={user}
            onClose={() => setForgetting(false)}
            onDone={() => go("/users")}
          />
        </>
      )}
    </section>
  );
}

/** Names exactly what forgetting will remove (asked from the server when opened). */
export function ForgetDialog(props: {
  open: boolean;
  user: string;
  session?: string;
  onClose: () => void;
  onDone: () => void;
}) {
  const preview = useLoad(
    () => (props.open ? api.forgetPreview(props.user, props.session) : Promise.resolve(null)),
    [props.open, props.user, props.session],
  );
  const [error, setError] = useState<string | null>(null);
  const what = props.session ? `session ${props.session} of user ${props.user}` : `user ${props.user}`;
  const p = preview.data;
  return (
    <Confirm
      open={props.open}
      title={`Forget ${what}?`}
      confirmLabel={props.session ? "Forget this session" : "Forget this user"}
      onCancel={props.onClose}
      onConfirm={async () => {
        try {
          if (props.session) await api.forgetSession(props.user, props.session);
          else await api.forgetUser(props.user);
          props.onClose();
          props.onDone();
        } catch (e) {
          setError(describe(e));
        }
      }}
    >
      <Status loaded={preview} />
      {p && (
        <p class="forget-summary">
          This removes {plural(p.episodes, "episode")}
          {props.session ? "" : ` in ${plural(p.sessions, "session")}`},{" "}
          {plural(p.facts, "fact")}
          {props.session ? " sourced from it" : ""} and{" "}
          {plural(p.working_sessions, "live working memory")}
          {props.session ? "" : ", with the user's fact history and custom memories"}. It cannot be
          undone.
        </p>
      )}
      {error && <ErrorNote message={error} />}
    </Confirm>
  );
}

export function EpisodeCard(props: {
  episode: Episode;
  user: string;
  me: Me;
  current?: boolean;
  onDeleted?: () => void;
  extra?: preact.ComponentChildren;
}) {
  const { episode, user } = props;
  const [confirm, setConfirm] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const shown = Object.fromEntries(
    Object.entries(episode.metadata).filter(([k]) => k !== "redacted" && k !== "suspected_injection"),
  );
  return (
    <article class={`episode${props.current ? " current" : ""}`} aria-label={`episode ${episode.sequence}`}>
      <header>
        <strong class="speaker">{episode.producer ?? episode.role}</strong>
        <span class="muted"> ({episode.role}) </span>
        <Time value={episode.timestamp} />
        <span class="muted"> · #{episode.sequence} · {episode.session_id}</span>
        <Marks metadata={episode.metadata} />
        {props.extra}
      </header>
      <p class="content">{episode.content}</p>
      <footer>
        {Object.keys(shown).length > 0 && <Json value={shown} label="metadata" />}
        <a href={href(`/users/${encodeURIComponent(user)}/episodes/${encodeURIComponent(episode.id)}`)}>
          neighbours
        </a>
        {props.me.can_write && (
          <button type="button" class="link danger" onClick={() => setConfirm(true)}>
            delete
          </button>
        )}
      </footer>
      {error && <ErrorNote message={error} />}
      <Confirm
        open={confirm}
        title="Delete this episode?"
        confirmLabel="Delete episode"
        onCancel={() => setConfirm(false)}
        onConfirm={async () => {
          setConfirm(false);
          try {
            await api.deleteEpisode(user, episode.id);
            props.onDeleted?.();
          } catch (e) {
            setError(describe(e));
          }
        }}
      >
        <p>
          Episode #{episode.sequence} of session {episode.session_id} (“{episode.content.slice(0, 80)}
          {episode.content.length > 80 ? "…" : ""}”) is removed; facts that rested only on it go
          back to their previous value or are deleted.
        </p>
      </Confirm>
    </article>
  );
}

export function SessionView({ user, session, me }: { user: string; session: string; me: Me }) {
  const limit = 50;
  const [offset, setOffset] = useState(0);
  const page = useLoad(() => api.episodes(user, session, limit, offset), [user, session, offset]);
  const [forgetting, setForgetting] = useState(false);
  const total = page.data?.total ?? 0;
  const pages = Math.max(1, Math.ceil(total / limit));
  return (
    <section>
      <h1 tabIndex={-1}>
        Session {session} <span class="muted">of {user}</span>
      </h1>
      <p>
        <a href={href(`/users/${encodeURIComponent(user)}/prompt?session=${encodeURIComponent(session)}`)}>
          Working memory and prompt of this session
        </a>
      </p>
      <Status loaded={page} />
      {page.data && (
        <>
          <p>
            {plural(total, "episode")}, oldest first; page {Math.floor(offset / limit) + 1} of {pages}.
          </p>
          <Pager total={total} limit={limit} offset={offset} onOffset={setOffset} label="episode pages" />
          <ol class="timeline" aria-label="episodes">
            {page.data.episodes.map((episode) => (
              <li key={episode.id}>
                <EpisodeCard episode={episode} user={user} me={me} onDeleted={page.reload} />
              </li>
            ))}
          </ol>
          <Pager total={total} limit={limit} offset={offset} onOffset={setOffset} label="episode pages, bottom" />
        </>
      )}
      {me.can_write && (
        <>
          <button type="button" class="danger" onClick={() => setForgetting(true)}>
            Forget session {session}…
          </button>
          <ForgetDialog
            open={forgetting}
            user={user}
            session={session}
            onClose={() => setForgetting(false)}
            onDone={() => go(`/users/${encodeURIComponent(user)}`)}
          />
        </>
      )}
    </section>
  );
}

function Pager(props: {
  total: number;
  limit: number;
  offset: number;
  onOffset: (offset: number) => void;
  label: string;
}) {
  const last = Math.max(0, Math.ceil(props.total / props.limit) - 1) * props.limit;
  return (
    <nav class="pager" aria-label={props.label}>
      <button type="button" disabled={props.offset === 0} onClick={() => props.onOffset(0)}>
        First
      </button>
      <button
        type="button"
        disabled={props.offset === 0}
        onClick={() => props.onOffset(Math.max(0, props.offset - props.limit))}
      >
        Previous
      </button>
      <button
        type="button"
        disabled={props.offset >= last}
        onClick={() => props.onOffset(props.offset + props.limit)}
      >
        Next
      </button>
      <button type="button" disabled={props.offset >= last} onClick={() => props.onOffset(last)}>
        Last
      </button>
      <form
        class="inline"
        onSubmit={(event) => {
          event.preventDefault();
          const page = Number(new FormData(event.currentTarget).get("page"));
          if (Number.isInteger(page) && page >= 1) {
            props.onOffset(Math.min(last, (page - 1) * props.limit));
          }
        }}
      >
        <label>
          Page <input name="page" type="number" min="1" max={String(last / props.limit + 1)} size={6} />
        </label>
        <button type="submit">Go</button>
      </form>
    </nav>
  );
}

export function EpisodeView({ user, episode, me }: { user: string; episode: string; me: Me }) {
  const [around, setAround] = useState(3);
  const loaded = useLoad(() => api.neighbours(user, episode, around), [user, episode, around]);
  const d = loaded.data;
  return (
    <section>
      <h1 tabIndex={-1}>Episode and its neighbours</h1>
      <Status loaded={loaded} />
      {d && (
        <>
          <p>
            In{" "}
            <a href={href(`/users/${encodeURIComponent(user)}/sessions/${encodeURIComponent(d.episode.session_id)}`)}>
              session {d.episode.session_id}
            </a>
            .{" "}
            <button type="button" onClick={() => setAround(around + 5)}>
              Show more around it
            </button>
          </p>
          <ol class="timeline" aria-label="episode in context">
            {d.before.map((e) => (
              <li key={e.id}><EpisodeCard episode={e} user={user} me={me} onDeleted={loaded.reload} /></li>
            ))}
            <li>
              <EpisodeCard episode={d.episode} user={user} me={me} current onDeleted={() => history.back()} />
            </li>
            {d.after.map((e) => (
              <li key={e.id}><EpisodeCard episode={e} user={user} me={me} onDeleted={loaded.reload} /></li>
            ))}
          </ol>
        </>
      )}
    </section>
  );
}
