// Server-Sent Events over fetch: EventSource cannot send x-svc-token, and the session must not
// become a cookie or a URL parameter (docs/app.md). Parsed as the HTML standard's event-stream
// format; reconnects after the server's `retry:` (with backoff while failing) and sends
// Last-Event-ID when the stream gave ids (the project event log does; the inbox stream has none,
// so its screen reads the inbox again after every reconnect instead).
import { apiFetch, ApiError } from '../api.ts';
import { SseParser, type SseMessage } from './sse-parser.ts';

export type { SseMessage };

export interface StreamHandlers {
  /** Each dispatched event. */
  onMessage(message: SseMessage): void;
  /** Each time the stream is (re)connected; `reconnected` is false the first time. */
  onOpen?(reconnected: boolean): void;
  /** The stream gave up for good (401, 403, 404: reconnecting would not help). */
  onFail?(err: unknown): void;
}

const MAX_BACKOFF_MS = 30_000;

/** Opens `path` (under {app_url}) as an event stream until `close()`; reconnects on its own. */
export function openStream(path: string, handlers: StreamHandlers): { close(): void } {
  const abort = new AbortController();
  let lastEventId: string | undefined;
  let retryMs = 2000;
  void (async () => {
    let opened = 0;
    let failures = 0;
    while (!abort.signal.aborted) {
      try {
        const headers: Record<string, string> = { accept: 'text/event-stream' };
        if (lastEventId !== undefined) headers['last-event-id'] = lastEventId;
        const res = await apiFetch(path, { headers, signal: abort.signal });
        if (!res.body) throw new Error('the stream has no body');
        const parser = new SseParser((m) => {
          if (m.id !== undefined) lastEventId = m.id;
          handlers.onMessage(m);
        });
        handlers.onOpen?.(opened++ > 0);
        failures = 0;
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          parser.push(value);
          if (parser.retryMs !== undefined) retryMs = parser.retryMs;
        }
      } catch (err) {
        if (abort.signal.aborted) return;
        // Access is gone (signed out, grant withdrawn): reconnecting cannot help.
        if (err instanceof ApiError && [401, 403, 404].includes(err.status)) {
          handlers.onFail?.(err);
          return;
        }
        failures++;
      }
      if (abort.signal.aborted) return;
      const wait = Math.min(MAX_BACKOFF_MS, retryMs * 2 ** Math.min(failures, 4));
      await new Promise((r) => setTimeout(r, wait));
    }
  })();
  return { close: () => abort.abort() };
}
