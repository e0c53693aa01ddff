// Charts drawn as plain SVG: bars over time and histograms. Each has a text alternative
// (a table a screen reader can read) and a title.

export interface Bar {
  label: string;
  value: number;
}

export function BarChart(props: { title: string; bars: Bar[]; unit: string; id: string }) {
  const { bars } = props;
  const width = 640;
  const height = 180;
  const pad = 28;
  const max = Math.max(1, ...bars.map((bar) => bar.value));
  const step = bars.length ? (width - pad * 2) / bars.length : 0;
  const barWidth = Math.max(1, Math.min(40, step * 0.8));
  return (
    <figure class="chart" aria-labelledby={`${props.id}-title`}>
      <figcaption id={`${props.id}-title`}>{props.title}</figcaption>
      {bars.length === 0 ? (
        <p class="muted">Nothing to show yet.</p>
      ) : (
        <svg viewBox={`0 0 ${width} ${height}`} role="img" aria-label={props.title}>
          <line x1={pad} y1={height - pad} x2={width - pad} y2={height - pad} class="axis" />
          <text x={pad - 4} y={pad} class="tick" text-anchor="end">
            {max}
          </text>
          <text x={pad - 4} y={height - pad} class="tick" text-anchor="end">
            0
          </text>
          {bars.map((bar, i) => {
            const h = ((height - pad * 2) * bar.value) / max;
            const x = pad + i * step + (step - barWidth) / 2;
            return (
              <rect
                key={bar.label}
                x={x}
                y={height - pad - h}
                width={barWidth}
                height={h}
                class="bar"
              >
                <title>{`${bar.label}: ${bar.value} ${props.unit}`}</title>
              </rect>
            );
          })}
          {bars.length > 0 && (
            <>
              <text x={pad} y={height - 8} class="tick">
                {bars[0].label}
              </text>
              <text x={width - pad} y={height - 8} class="tick" text-anchor="end">
                {bars[bars.length - 1].label}
              </text>
            </>
          )}
        </svg>
      )}
      <details>
        <summary>Data</summary>
        <table>
          <thead>
            <tr>
              <th scope="col">bucket</th>
              <th scope="col">{props.unit}</th>
            </tr>
          </thead>
          <tbody>
            {bars.map((bar) => (
              <tr key={bar.label}>
                <td>{bar.label}</td>
                <td>{bar.value}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </details>
    </figure>
  );
}

/** Counts of `values` in `buckets` equal bins over [low, high]. */
export function histogram(values: number[], low: number, high: number, buckets: number): Bar[] {
  const width = (high - low) / buckets;
  const counts = new Array<number>(buckets).fill(0);
  for (const value of values) {
    const index = Math.min(buckets - 1, Math.max(0, Math.floor((value - low) / width)));
    counts[index] += 1;
  }
  return counts.map((count, i) => ({
    label: `${(low + i * width).toFixed(width < 1 ? 1 : 0)}–${(low + (i + 1) * width).toFixed(width < 1 ? 1 : 0)}`,
    value: count,
  }));
}
