// A user's background jobs: queue depth, running, failing and dead jobs with their last
// error; a dead job can be replayed.
import { useState } from "preact/hooks";
import { api, type Job, type Me } from "./api";
import { describe, ErrorNote, Status, Time, useLoad } from "./ui";

export function JobsView({ user, me }: { user: string; me: Me }) {
  const counts = useLoad(() => api.jobCounts(user), [user]);
  const jobs = useLoad(() => api.jobs(user), [user]);
  const [error, setError] = useState<string | null>(null);
  const all = jobs.data?.jobs ?? [];
  const failing = all.filter((j) => j.status === "queued" && j.last_error);
  const groups: [string, Job[]][] = [
    ["Dead", all.filter((j) => j.status === "dead")],
    ["Failing, will retry", failing],
    ["Running", all.filter((j) => j.status === "running")],
    ["Queued", all.filter((j) => j.status === "queued" && !j.last_error)],
    ["Done", all.filter((j) => j.status === "done")],
  ];
  const reload = () => {
    counts.reload();
    jobs.reload();
  };
  return (
    <section>
      <h1 tabIndex={-1}>Jobs of {user}</h1>
      <Status loaded={counts} />
      {counts.data && (
        <dl class="counts">
          <div><dt>queue depth</dt><dd>{counts.data.queued}</dd></div>
          <div><dt>running</dt><dd>{counts.data.running}</dd></div>
          <div><dt>failing</dt><dd>{failing.length}</dd></div>
          <div><dt>dead</dt><dd>{counts.data.dead}</dd></div>
          <div><dt>done</dt><dd>{counts.data.done}</dd></div>
        </dl>
      )}
      <button type="button" onClick={reload}>
        Refresh
      </button>
      {error && <ErrorNote message={error} />}
      <Status loaded={jobs} />
      {groups.map(([title, list]) =>
        list.length === 0 ? null : (
          <div key={title}>
            <h2>{title}</h2>
            <table>
              <thead>
                <tr>
                  <th scope="col">job</th>
                  <th scope="col">kind</th>
                  <th scope="col">session</th>
                  <th scope="col" class="num">attempts</th>
                  <th scope="col">updated</th>
                  <th scope="col">last error</th>
                  <th scope="col"><span class="visually-hidden">actions</span></th>
                </tr>
              </thead>
              <tbody>
                {list.map((job) => (
                  <tr key={job.id}>
                    <th scope="row">{job.id}</th>
                    <td>{job.kind}</td>
                    <td>{job.session_id ?? "–"}</td>
                    <td class="num">
                      {job.attempts} / {job.max_attempts}
                    </td>
                    <td><Time value={job.updated_at} /></td>
                    <td class="error-text">{job.last_error ?? ""}</td>
                    <td>
                      {job.status === "dead" && me.can_write && (
                        <button
                          type="button"
                          onClick={async () => {
                            try {
                              await api.replay(user, job.id);
                              reload();
                            } catch (e) {
                              setError(describe(e));
                            }
                          }}
                        >
                          Replay <span class="visually-hidden">{job.id}</span>
                        </button>
                      )}
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        ),
      )}
      {jobs.data && all.length === 0 && <p class="muted">No jobs for this user.</p>}
    </section>
  );
}
