// Search latency as the browser measured it (request to parsed answer), kept for the tab's
// session so the charts can show it.
const KEY = "memmachine.inspector.latency";

export function recordLatency(ms: number): void {
  const kept = latencies();
  kept.push(Math.round(ms * 10) / 10);
  sessionStorage.setItem(KEY, JSON.stringify(kept.slice(-200)));
}

export function latencies(): number[] {
  try {
    const value = JSON.parse(sessionStorage.getItem(KEY) ?? "[]");
    return Array.isArray(value) ? value.filter((v) => typeof v === "number") : [];
  } catch {
    return [];
  }
}
