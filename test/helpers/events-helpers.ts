// Helpers shared by the event log tests: inboxes without Dovecot users (the log never touches
// IMAP), JSON checks, and a small Server-Sent Events reader.
import { expect } from 'chai';
import { call, unique, type TestProject, type TestServer } from './harness.ts';
import { sseBlocks } from './sse-frames.ts';
import type { CloudEvent } from '../../lib/events/types.ts';

export { expectError, json } from './harness.ts';

/** An inbox in the project's directory only, granted to the project's member (or another). */
export async function addInbox(s: TestServer, p: TestProject, options: { memberId?: string; role?: string } = {}): Promise<string> {
  const address = `${unique('evbox')}@example.org`;
  const { id } = await s.postern.admin.addInbox({ projectId: p.projectId, imapUser: address, addresses: [address] });
  await s.postern.admin.grant(options.memberId ?? p.memberId, id, options.role ?? 'owner');
  return id;
}

/** An event as served: the domain's own CloudEvent shape, so a test cannot drift from it. */
export type WireEvent = CloudEvent;

export interface Page {
  events: WireEvent[];
  cursor: string;
}

export async function getPage(url: string, auth: { token?: string; session?: string }): Promise<Page> {
  const res = await call(url, auth);
  const text = await res.text();
  expect(res.status, `${url}: ${text}`).to.equal(200);
  return JSON.parse(text) as Page;
}

export interface Frame {
  id?: string;
  event?: string;
  data: string;
}

/** A live stream read frame by frame. */
export class SseClient {
  readonly frames: Frame[] = [];
  comments = 0;
  ended = false;
  status = 0;
  private waiters: Array<() => void> = [];
  private readonly controller = new AbortController();

  static async open(url: string, auth: { token?: string; session?: string; lastEventId?: string }): Promise<SseClient> {
    const c = new SseClient();
    const headers: Record<string, string> = { accept: 'text/event-stream' };
    if (auth.lastEventId) headers['last-event-id'] = auth.lastEventId;
    const res = await call(url, { ...auth, headers, signal: c.controller.signal });
    c.status = res.status;
    if (res.status !== 200) throw new Error(`stream ${url}: ${res.status} ${await res.text()}`);
    expect(res.headers.get('content-type')).to.match(/^text\/event-stream/);
    void c.pump(res.body!);
    return c;
  }

  private async pump(body: ReadableStream<Uint8Array>): Promise<void> {
    try {
      for await (const block of sseBlocks(body)) {
        if (block.comment) this.comments++;
        if (block.event !== undefined)
          this.frames.push({ ...(block.id !== undefined ? { id: block.id } : {}), event: block.event, data: block.data ?? '' });
        this.wake();
      }
    } catch {
      // aborted by close(), or cut by the server
    }
    this.ended = true;
    this.wake();
  }

  private wake(): void {
    for (const w of this.waiters.splice(0)) w();
  }

  /** Waits until `n` frames arrived (or the stream ended, or the time is up). */
  async waitFor(n: number, timeoutMs = 5000): Promise<Frame[]> {
    const deadline = Date.now() + timeoutMs;
    while (this.frames.length < n && !this.ended && Date.now() < deadline) {
      await new Promise<void>((resolve) => {
        this.waiters.push(resolve);
        setTimeout(resolve, Math.max(1, deadline - Date.now()));
      });
    }
    return this.frames;
  }

  async waitUntil(pred: () => boolean, timeoutMs = 5000): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (!pred() && !this.ended && Date.now() < deadline) {
      await new Promise<void>((resolve) => {
        this.waiters.push(resolve);
        setTimeout(resolve, Math.max(1, Math.min(50, deadline - Date.now())));
      });
    }
    return pred();
  }

  events(): WireEvent[] {
    return this.frames.map((f) => JSON.parse(f.data) as WireEvent);
  }

  close(): void {
    this.controller.abort();
  }
}

/** Registers an ext type with a token holding events:write; returns nothing, asserts 201. */
export async function register(s: TestServer, token: string, body: Record<string, unknown>): Promise<void> {
  const res = await call(`${s.base}/event-types`, {
    method: 'POST',
    token,
    body: JSON.stringify(body),
    headers: { 'content-type': 'application/json' },
  });
  expect(res.status, await res.clone().text()).to.equal(201);
}

export function post(s: TestServer, token: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return call(`${s.base}/events`, {
    method: 'POST',
    token,
    body: typeof body === 'string' ? body : JSON.stringify(body),
    headers: { 'content-type': 'application/json', ...headers },
  });
}
