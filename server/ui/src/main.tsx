// The inspector's shell: log in once per browser tab, then the views over the REST API.
import { render } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import { api, type Me, storedKey, storedSpace, storeKey, storeSpace } from "./api";
import { ChartsView } from "./insights";
import { JobsView } from "./jobs";
import { ProceduresView, ProcedureView } from "./procedures";
import { ProfileView } from "./profile";
import { PromptView } from "./prompt";
import { currentRoute, href, type Route } from "./route";
import { SearchView } from "./search";
import { describe, ErrorNote } from "./ui";
import { EpisodeView, SessionView, UserView, UsersView } from "./users";

function useRoute(): Route {
  const [route, setRoute] = useState(currentRoute());
  useEffect(() => {
    const update = () => setRoute(currentRoute());
    addEventListener("hashchange", update);
    return () => removeEventListener("hashchange", update);
  }, []);
  return route;
}

function App() {
  const [me, setMe] = useState<Me | null>(null);
  const [checking, setChecking] = useState(true);
  const [error, setError] = useState<string | null>(null);

  const check = async (key: string) => {
    setChecking(true);
    try {
      const found = await api.whoami(key);
      if (!found.can_read) {
        setError("This key may not read memories (an admin-only key): use a key with read permission.");
        setMe(null);
      } else {
        storeKey(key);
        setMe(found);
        setError(null);
      }
    } catch (e) {
      storeKey("");
      setMe(null);
      if (key) setError(describe(e));
    } finally {
      setChecking(false);
    }
  };

  useEffect(() => {
    void check(storedKey());
  }, []);

  if (checking && !me) {
    return (
      <p class="muted" role="status">
        Connecting…
      </p>
    );
  }
  if (!me) return <Login error={error} onKey={check} />;
  return (
    <Shell
      me={me}
      onLogout={() => {
        storeKey("");
        setMe(null);
        void check("");
      }}
    />
  );
}

function Login({ error, onKey }: { error: string | null; onKey: (key: string) => void }) {
  return (
    <main class="login">
      <h1>memmachine inspector</h1>
      <p>Enter an API key. It is kept in this browser tab only, until you log out or close it.</p>
      <form
        onSubmit={(event) => {
          event.preventDefault();
          onKey(String(new FormData(event.currentTarget).get("key") ?? "").trim());
        }}
      >
        <label>
          API key <input name="key" type="password" autoComplete="off" required autoFocus />
        </label>
        <button type="submit">Log in</button>
      </form>
      {error && <ErrorNote message={error} />}
    </main>
  );
}

function Shell({ me, onLogout }: { me: Me; onLogout: () => void }) {
  const route = useRoute();
  const [space, setSpace] = useState(storedSpace());
  const main = useRef<HTMLElement>(null);
  const [section, user, kind, id] = route.path;
  const lastUser = section === "users" && user ? user : sessionStorage.getItem("memmachine.inspector.user") ?? "";
  useEffect(() => {
    if (section === "users" && user) sessionStorage.setItem("memmachine.inspector.user", user);
    main.current?.querySelector<HTMLElement>("h1")?.focus();
  }, [route.path.join("/")]);

  let view;
  if (section === "search") view = <SearchView user={lastUser} />;
  else if (section === "procedures") {
    view = user ? <ProcedureView id={user} /> : <ProceduresView />;
  }
  else if (section === "users" && user) {
    if (kind === "sessions" && id) view = <SessionView user={user} session={id} me={me} />;
    else if (kind === "episodes" && id) view = <EpisodeView user={user} episode={id} me={me} />;
    else if (kind === "profile") view = <ProfileView user={user} me={me} />;
    else if (kind === "prompt") view = <PromptView user={user} session={route.query.get("session") ?? ""} />;
    else if (kind === "jobs") view = <JobsView user={user} me={me} />;
    else if (kind === "charts") view = <ChartsView user={user} />;
    else view = <UserView user={user} me={me} />;
  } else view = <UsersView />;

  const current = `/${route.path.map(encodeURIComponent).join("/")}`;
  const link = (path: string, label: string) => (
    <a href={href(path)} aria-current={current === path ? "page" : undefined}>
      {label}
    </a>
  );
  const u = lastUser ? `/users/${encodeURIComponent(lastUser)}` : "";
  return (
    <div class="shell" key={`${space.org_id}/${space.project_id}`}>
      <header class="top">
        <a class="brand" href={href("/users")}>
          memmachine inspector
        </a>
        <form
          class="space"
          aria-label="org and project"
          onSubmit={(event) => {
            event.preventDefault();
            const data = new FormData(event.currentTarget);
            const next = {
              org_id: String(data.get("org_id") || "default"),
              project_id: String(data.get("project_id") || "default"),
            };
            storeSpace(next);
            setSpace(next);
          }}
        >
          <label>
            Org <input name="org_id" defaultValue={space.org_id} size={10} />
          </label>
          <label>
            Project <input name="project_id" defaultValue={space.project_id} size={10} />
          </label>
          <button type="submit">Switch</button>
        </form>
        <p class="who" aria-label="signed in as">
          tenant <strong>{me.tenant}</strong>
          {me.key_id ? ` · key ${me.key_id}` : " · open server, no key"}
          {!me.can_write && <span class="mark readonly">read-only</span>}
        </p>
        {me.key_id && (
          <button type="button" onClick={onLogout}>
            Log out
          </button>
        )}
      </header>
      <nav class="side" aria-label="views">
        <ul>
          <li>{link("/users", "Users")}</li>
          <li>{link("/search", "Search")}</li>
          <li>{link("/procedures", "Procedures")}</li>
        </ul>
        {u && (
          <>
            <h2 class="nav-user">{lastUser}</h2>
            <ul>
              <li>{link(u, "Sessions")}</li>
              <li>{link(`${u}/profile`, "Profile")}</li>
              <li>{link(`${u}/prompt`, "Working memory & prompt")}</li>
              <li>{link(`${u}/jobs`, "Jobs")}</li>
              <li>{link(`${u}/charts`, "Charts")}</li>
            </ul>
          </>
        )}
      </nav>
      <main ref={main} id="main">
        {view}
      </main>
    </div>
  );
}

render(<App />, document.getElementById("app") as HTMLElement);
