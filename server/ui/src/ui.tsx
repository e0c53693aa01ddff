// Small shared pieces: loading data, showing errors, times, marks and confirmations.
import type { ComponentChildren } from "preact";
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { ApiError } from "./api";

export interface Loaded<T> {
  data: T | null;
  error: string | null;
  loading: boolean;
  reload: () => void;
}

/** Runs `load` now and whenever `deps` change; `reload()` runs it again. */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[]): Loaded<T> {
  const [state, setState] = useState<{ data: T | null; error: string | null; loading: boolean }>(
    { data: null, error: null, loading: true },
  );
  const [round, setRound] = useState(0);
  useEffect(() => {
    let live = true;
    setState((s) => ({ ...s, loading: true, error: null }));
    load().then(
      (data) => live && setState({ data, error: null, loading: false }),
      (error) => live && setState({ data: null, error: describe(error), loading: false }),
    );
    return () => {
      live = false;
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [...deps, round]);
  const reload = useCallback(() => setRound((r) => r + 1), []);
  return { ...state, reload };
}

export function describe(error: unknown): string {
  if (error instanceof ApiError) {
    return error.field ? `${error.message} (field: ${error.field})` : error.message;
  }
  return error instanceof Error ? error.message : String(error);
}

export function Status({ loaded }: { loaded: Loaded<unknown> }) {
  if (loaded.error) return <ErrorNote message={loaded.error} />;
  if (loaded.loading && loaded.data === null) {
    return (
      <p class="muted" role="status">
        Loading…
      </p>
    );
  }
  return null;
}

export function ErrorNote({ message }: { message: string }) {
  return (
    <p class="error" role="alert">
      {message}
    </p>
  );
}

export function time(value: string | null | undefined): string {
  if (!value) return "–";
  const date = new Date(value);
  return `${date.toISOString().slice(0, 10)} ${date.toISOString().slice(11, 19)} UTC`;
}

export function Time({ value }: { value: string | null | undefined }) {
  return value ? <time dateTime={value}>{time(value)}</time> : <span>–</span>;
}

/** Redaction and poisoning marks the write path left in an episode's metadata. */
export function Marks({ metadata }: { metadata: Record<string, unknown> }) {
  const redacted = metadata.redacted as Record<string, number> | undefined;
  const injection = metadata.suspected_injection as string | undefined;
  return (
    <>
      {redacted && (
        <span class="mark redacted" title="PII was replaced before storing">
          redacted: {Object.entries(redacted).map(([kind, n]) => `${n} ${kind}`).join(", ")}
        </span>
      )}
      {injection && (
        <span class="mark poisoned" title="reads as an instruction to the model">
          suspected injection: {injection}
        </span>
      )}
    </>
  );
}

export function Json({ value, label }: { value: unknown; label: string }) {
  const text = JSON.stringify(value, null, 2);
  return (
    <details class="json">
      <summary>{label}</summary>
      <pre tabIndex={0}>{text}</pre>
    </details>
  );
}

/** A modal confirmation (native <dialog>: focus is trapped, Escape cancels). */
export function Confirm(props: {
  open: boolean;
  title: string;
  confirmLabel: string;
  onConfirm: () => void;
  onCancel: () => void;
  children: ComponentChildren;
}) {
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    const dialog = ref.current;
    if (!dialog) return;
    if (props.open && !dialog.open) dialog.showModal();
    if (!props.open && dialog.open) dialog.close();
  }, [props.open]);
  return (
    <dialog ref={ref} aria-labelledby="confirm-title" onCancel={props.onCancel}>
      <h2 id="confirm-title">{props.title}</h2>
      <div>{props.children}</div>
      <div class="actions">
        <button type="button" onClick={props.onCancel}>
          Cancel
        </button>
        <button type="button" class="danger" onClick={props.onConfirm}>
          {props.confirmLabel}
        </button>
      </div>
    </dialog>
  );
}

export function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}
