// Helpers shared by the event log tests: inboxes without Dovecot users (the log never touches
// IMAP), JSON checks, and a small Server-Sent Events reader.
import { expect } from 'chai';
import { call, unique, type TestProject, type TestServer } from './harness.ts';

export async function json<T = Record<string, unknown>>(res: Response): Promise<T> {
  expect(res.headers.get('content-type'), `content type of ${res.url}`).to.match(/^application\/json/);
  return (await res.json()) as T;
}

export async function expectError(res: Response, status: number, pattern?: RegExp): Promise<string> {
  const text = await res.text();
  expect(res.status, `status of ${res.url}: ${text}`).to.equal(status);
  const body = JSON.parse(text) as Record<string, unknown>;
  expect(Object.keys(body)).to.deep.equal(['error']);
  expect(body.error).to.be.a('string').and.not.equal('');
  if (pattern) expect(body.error).to.match(pattern);
  return body.error as string;
}

/** An inbox in the project's directory only, granted to the project's member (or another). */
export async function addInbox(s: TestServer, p: TestProject, options: { memberId?: string; role?: string } = {}): Promise<string> {
  const address = `${unique('evbox')}@example.org`;
  const { id } = await s.postern.admin.addInbox({ projectId: p.projectId, imapUser: address, addresses: [address] });
  await s.postern.admin.grant(options.memberId ?? p.memberId, id, options.role ?? 'owner');
  return id;
}

export interface WireEvent {
  specversion: string;
  id: string;
  type: string;
  source: string;
  time: string;
  scope: string;
  sequence: string;
  actor: string;
  class: string;
  visibility: string;
  containerid?: string;
  subject?: string;
  dataschema?: string;
  data?: Record<string, unknown>;
}

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
    const decoder = new TextDecoder();
    let buf = '';
    try {
      for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) {
        buf += decoder.decode(chunk, { stream: true });
        let at: number;
        while ((at = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, at);
          buf = buf.slice(at + 2);
          const frame: Frame = { data: '' };
          const data: string[] = [];
          let isFrame = false;
          for (const line of block.split('\n')) {
            if (line.startsWith(':')) this.comments++;
            else if (line.startsWith('id: ')) (frame.id = line.slice(4)), (isFrame = true);
            else if (line.startsWith('event: ')) (frame.event = line.slice(7)), (isFrame = true);
            else if (line.startsWith('data: ')) data.push(line.slice(6)), (isFrame = true);
          }
          frame.data = data.join('\n');
          if (isFrame && frame.event !== undefined) this.frames.push(frame);
          this.wake();
        }
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
  const res = await call(`${s.base}/event-types`, { method: 'POST', token, body: JSON.stringify(body), headers: { 'content-type': 'application/json' } });
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
