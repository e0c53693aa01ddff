// Charts of one user: episodes over time, fact confidence, and the search latency this
// browser measured.
import { useState } from "preact/hooks";
import { api } from "./api";
import { BarChart, histogram } from "./charts";
import { latencies } from "./latency";
import { Status, useLoad } from "./ui";

const BUCKETS: [string, number][] = [
  ["hour", 3600],
  ["day", 86_400],
  ["week", 7 * 86_400],
  ["30 days", 30 * 86_400],
];

export function ChartsView({ user }: { user: string }) {
  const [bucket, setBucket] = useState(86_400);
  const timeline = useLoad(() => api.timeline(user, bucket), [user, bucket]);
  const facts = useLoad(() => api.facts(user), [user]);
  const measured = latencies();
  const label = (start: string) =>
    bucket < 86_400 ? start.slice(0, 13).replace("T", " ") + "h" : start.slice(0, 10);
  return (
    <section>
      <h1 tabIndex={-1}>Charts of {user}</h1>
      <label>
        Episodes per{" "}
        <select value={String(bucket)} onChange={(e) => setBucket(Number(e.currentTarget.value))}>
          {BUCKETS.map(([name, seconds]) => (
            <option key={seconds} value={String(seconds)}>
              {name}
            </option>
          ))}
        </select>
      </label>
      <Status loaded={timeline} />
      {timeline.data && (
        <BarChart
          id="episodes"
          title="Episodes over time (by episode timestamp, UTC)"
          unit="episodes"
          bars={filled(timeline.data.buckets, bucket).map((b) => ({ label: label(b.start), value: b.count }))}
        />
      )}
      <Status loaded={facts} />
      {facts.data && (
        <BarChart
          id="confidence-chart"
          title="Fact confidence (now, after ageing)"
          unit="facts"
          bars={histogram(facts.data.facts.map((f) => f.effective_confidence ?? f.confidence), 0, 1, 10)}
        />
      )}
      <BarChart
        id="latency"
        title={`Search latency measured by this browser (${measured.length} searches this session, ms)`}
        unit="searches"
        bars={
          measured.length
            ? histogram(measured, 0, Math.max(50, Math.ceil(Math.max(...measured) / 50) * 50), 10)
            : []
        }
      />
    </section>
  );
}

/** The buckets with the empty ones between them put back (so bars keep the time scale),
 * unless that would make more bars than a chart can show. */
function filled(buckets: { start: string; count: number }[], seconds: number) {
  if (buckets.length < 2) return buckets;
  const first = Date.parse(buckets[0].start);
  const last = Date.parse(buckets[buckets.length - 1].start);
  const count = Math.round((last - first) / (seconds * 1000)) + 1;
  if (count > 400) return buckets;
  const byStart = new Map(buckets.map((b) => [Date.parse(b.start), b.count]));
  return Array.from({ length: count }, (_, i) => {
    const start = first + i * seconds * 1000;
    return { start: new Date(start).toISOString(), count: byStart.get(start) ?? 0 };
  });
}
