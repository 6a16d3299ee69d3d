// docs/mail.md, "Limits": slow clients do not hold sockets forever. A connection whose headers, or whose body,
// do not arrive in time gets a JSON 408 and is closed; an open event stream is not cut by those
// deadlines; a body that stops arriving is cut after POSTERN_BODY_IDLE_TIMEOUT_MS, while a slow one
// that keeps moving is not; one address holds a bounded number of connections (429 beyond), except
// behind a trusted proxy; and clustered workers (POSTERN_WORKERS) apply the same settings.
import { connect, type Socket } from 'node:net';
import { expect } from 'chai';
import { ConfigError, loadConfig } from '../../lib/config.ts';
import { envVars, mailEnv, newProject, startPostern, type TestServer } from '../helpers/harness.ts';
import { SseClient } from '../helpers/events-helpers.ts';
import { freePort, spawnPostern, stopProcess } from '../helpers/processes.ts';

interface RawConnection {
  socket: Socket;
  /** Everything the server sent. */
  received(): string;
  /** Resolves (with the time since connecting) once the server closed the connection; rejects after `withinMs`. */
  closed(withinMs: number): Promise<number>;
}

/** A raw TCP client: it sends exactly what it is told, as slowly as a misbehaving client would. */
function rawConnection(url: string, send = ''): Promise<RawConnection> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(u.port), u.hostname);
    const started = performance.now();
    let data = '';
    let closedAt: number | null = null;
    const waiters: Array<() => void> = [];
    socket.setEncoding('utf8');
    socket.on('data', (d: string) => (data += d));
    socket.on('error', () => undefined);
    socket.on('close', () => {
      closedAt = performance.now() - started;
      for (const w of waiters.splice(0)) w();
    });
    socket.once('connect', () => {
      if (send) socket.write(send);
      resolve({
        socket,
        received: () => data,
        closed: (withinMs) =>
          new Promise<number>((done, fail) => {
            if (closedAt !== null) return done(closedAt);
            const timer = setTimeout(() => {
              socket.destroy();
              fail(new Error(`the server kept the connection open for ${withinMs} ms; it sent ${JSON.stringify(data)}`));
            }, withinMs);
            waiters.push(() => {
              clearTimeout(timer);
              done(closedAt!);
            });
          }),
      });
    });
    socket.once('error', reject);
  });
}

/** The status and JSON body of a raw HTTP response. */
function parseResponse(raw: string): { status: number; headers: string; body: Record<string, unknown> } {
  const [head = '', body = ''] = raw.split('\r\n\r\n');
  const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1] ?? 0);
  return { status, headers: head, body: body ? (JSON.parse(body) as Record<string, unknown>) : {} };
}

/** The status of the first response the server sends on `c`; rejects if none arrives within `withinMs`. */
async function responseOf(c: RawConnection, withinMs: number): Promise<number> {
  const deadline = performance.now() + withinMs;
  while (!c.received().includes('\r\n\r\n')) {
    if (performance.now() > deadline) throw new Error(`no response within ${withinMs} ms; got ${JSON.stringify(c.received())}`);
    await new Promise((r) => setTimeout(r, 10));
  }
  return Number(/^HTTP\/1\.1 (\d{3})/.exec(c.received())?.[1] ?? 0);
}

const get = (path: string, host: string) => `GET ${path} HTTP/1.1\r\nHost: ${host}\r\n`;

describe('slow clients and connections per address', function () {
  this.timeout(60_000);

  describe('request deadlines', () => {
    let s: TestServer;
    before(async () => {
      s = await startPostern({ POSTERN_HEADERS_TIMEOUT_MS: '300', POSTERN_REQUEST_TIMEOUT_MS: '600', POSTERN_STREAM_HEARTBEAT_MS: '100' });
    });
    after(() => s?.close());

    it('closes a connection whose headers do not arrive in time, with a JSON 408', async () => {
      const host = new URL(s.url).host;
      const partial = await rawConnection(s.url, get('/healthz', host));
      const silent = await rawConnection(s.url);
      for (const c of [partial, silent]) {
        expect(await c.closed(5000)).to.be.at.least(250);
        const res = parseResponse(c.received());
        expect(res.status).to.equal(408);
        expect(res.headers).to.match(/content-type: application\/json/i);
        expect(Object.keys(res.body)).to.deep.equal(['error']);
      }
    });

    it('closes connections whose request bodies stop coming, with a JSON 408', async () => {
      const p = await newProject(s);
      const writer = await p.token(['events:write']);
      const host = new URL(s.url).host;
      const head = `POST /v1/events HTTP/1.1\r\nHost: ${host}\r\nAuthorization: Bearer ${writer}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"type":`;
      // Several at once, as the 300 were: each is cut at its own deadline.
      const conns = await Promise.all(Array.from({ length: 10 }, () => rawConnection(s.url, head)));
      for (const c of conns) {
        expect(await c.closed(5000)).to.be.at.least(500);
        const res = parseResponse(c.received());
        expect(res.status).to.equal(408);
        expect(Object.keys(res.body)).to.deep.equal(['error']);
      }
    });

    it('answers malformed requests and oversized headers with JSON too (400, 431)', async () => {
      const host = new URL(s.url).host;
      const garbage = await rawConnection(s.url, 'NOT HTTP AT ALL\r\n\r\n');
      const huge = await rawConnection(s.url, `${get('/healthz', host)}X-Filler: ${'x'.repeat(20_000)}\r\n\r\n`);
      for (const [c, status] of [
        [garbage, 400],
        [huge, 431],
      ] as const) {
        await c.closed(5000);
        const res = parseResponse(c.received());
        expect(res.status).to.equal(status);
        expect(Object.keys(res.body)).to.deep.equal(['error']);
      }
    });

    it('does not cut an open event stream at the request deadline', async () => {
      const p = await newProject(s);
      const reader = await p.token(['events:read']);
      const c = await SseClient.open(`${s.base}/events`, { token: reader });
      try {
        const started = performance.now();
        // Heartbeats (every 100 ms) still arriving well past three request deadlines (600 ms).
        const beats = await c.waitUntil(() => c.comments >= 20 && performance.now() - started > 1800, 10_000);
        expect(beats, `${c.comments} heartbeats, ended: ${c.ended}`).to.equal(true);
        expect(c.ended).to.equal(false);
      } finally {
        c.close();
      }
    });
  });

  describe('a request body that stops arriving (POSTERN_BODY_IDLE_TIMEOUT_MS)', () => {
    let s: TestServer;
    let writer: string;
    // The whole request may take a minute: only the idle limit can cut these within seconds.
    before(async () => {
      s = await startPostern({ POSTERN_BODY_IDLE_TIMEOUT_MS: '500', POSTERN_REQUEST_TIMEOUT_MS: '60000' });
      const p = await newProject(s);
      writer = await p.token(['events:write']);
      const res = await fetch(`${s.base}/event-types`, {
        method: 'POST',
        headers: { authorization: `Bearer ${writer}`, 'content-type': 'application/json' },
        body: JSON.stringify({ name: 'ext.upload.done', description: 'x', data: [{ name: 'note', type: 'string' }] }),
      });
      expect(res.status).to.equal(201);
    });
    after(() => s?.close());

    const post = (length: number) => {
      const host = new URL(s.url).host;
      return `POST /v1/events HTTP/1.1\r\nHost: ${host}\r\nAuthorization: Bearer ${writer}\r\nContent-Type: application/json\r\nContent-Length: ${length}\r\n\r\n`;
    };

    it('cuts a body that sends nothing for the idle limit: a JSON 408, and the connection closes', async () => {
      const c = await rawConnection(s.url, `${post(1000)}{"type":`);
      const closedAt = await c.closed(5000);
      expect(closedAt).to.be.at.least(450);
      const res = parseResponse(c.received());
      expect(res.status).to.equal(408);
      expect(res.headers).to.match(/connection: close/i);
      expect(res.body.error).to.match(/stopped arriving/);
    });

    it('lets a slow body that keeps moving take longer than the idle limit', async () => {
      const body = JSON.stringify({ type: 'ext.upload.done', data: { note: 'x'.repeat(100) } });
      const c = await rawConnection(s.url, post(Buffer.byteLength(body)));
      const started = performance.now();
      // A byte or so every 150 ms: about 2 s in all, four idle limits, never idle for one.
      const pieces = body.match(/.{1,10}/g)!;
      for (const piece of pieces) {
        await new Promise((r) => setTimeout(r, 150));
        c.socket.write(piece);
      }
      expect(performance.now() - started).to.be.above(2000);
      expect(await responseOf(c, 5000)).to.equal(201);
      c.socket.destroy();
    });
  });

  it('refuses a headers deadline later than the request deadline at start-up', () => {
    expect(() => loadConfig({ POSTERN_HEADERS_TIMEOUT_MS: '5000', POSTERN_REQUEST_TIMEOUT_MS: '1000' })).to.throw(
      ConfigError,
      /POSTERN_HEADERS_TIMEOUT_MS/,
    );
  });

  describe('connections per address', () => {
    let s: TestServer | null = null;
    afterEach(async () => {
      await s?.close();
      s = null;
    });

    it('answers 429 to a connection over the cap, and takes new ones once one closes', async () => {
      s = await startPostern({ POSTERN_MAX_CONNECTIONS_PER_ADDRESS: '3' });
      const host = new URL(s.url).host;
      const held = await Promise.all([rawConnection(s.url), rawConnection(s.url), rawConnection(s.url)]);
      const over = await rawConnection(s.url, `${get('/healthz', host)}\r\n`);
      await over.closed(5000);
      const refused = parseResponse(over.received());
      expect(refused.status).to.equal(429);
      expect(refused.headers).to.match(/retry-after: \d+/i);
      expect(refused.body.error).to.match(/too many open connections from your address/);

      // The admitted connections are served as usual.
      held[0].socket.write(`${get('/healthz', host)}Connection: close\r\n\r\n`);
      await held[0].closed(5000);
      expect(parseResponse(held[0].received()).status).to.equal(200);

      // Its place is free again once the server saw it go.
      const deadline = Date.now() + 5000;
      let status = 0;
      while (status !== 200 && Date.now() < deadline) {
        const next = await rawConnection(s.url, `${get('/healthz', host)}Connection: close\r\n\r\n`);
        await next.closed(5000);
        status = parseResponse(next.received()).status;
      }
      expect(status).to.equal(200);
      for (const c of held) c.socket.destroy();
    });

    it('does not cap behind a trusted proxy (every client comes from its address)', async () => {
      s = await startPostern({ POSTERN_MAX_CONNECTIONS_PER_ADDRESS: '2', POSTERN_TRUST_PROXY: 'true' });
      const host = new URL(s.url).host;
      const held = await Promise.all([rawConnection(s.url), rawConnection(s.url), rawConnection(s.url)]);
      const fourth = await rawConnection(s.url, `${get('/healthz', host)}Connection: close\r\n\r\n`);
      await fourth.closed(5000);
      expect(parseResponse(fourth.received()).status).to.equal(200);
      for (const c of held) c.socket.destroy();
    });
  });

  it('clustered workers (POSTERN_WORKERS=2) apply the same deadlines and cap', async () => {
    const admin = await startPostern();
    const port = String(await freePort());
    const cluster = await spawnPostern(
      envVars(mailEnv(), {
        ...admin.storeEnv,
        POSTERN_WORKERS: '2',
        POSTERN_PORT: port,
        POSTERN_HEADERS_TIMEOUT_MS: '300',
        POSTERN_REQUEST_TIMEOUT_MS: '600',
        POSTERN_MAX_CONNECTIONS_PER_ADDRESS: '1',
      }),
    );
    try {
      const host = new URL(cluster.url).host;
      // The kernel hands each connection to whichever worker accepts it first: two slow ones may
      // land on one worker (the second then refused by its cap) or one on each. Either way none
      // is left open past the deadline, and at least one was held to it.
      const slow = await Promise.all([
        rawConnection(cluster.url, get('/healthz', host)),
        rawConnection(cluster.url, get('/healthz', host)),
      ]);
      const answers: number[] = [];
      for (const c of slow) {
        await c.closed(5000);
        answers.push(parseResponse(c.received()).status);
      }
      expect(
        answers.every((st) => st === 408 || st === 429),
        answers.join(),
      ).to.equal(true);
      expect(answers, answers.join()).to.include(408);
      // The cap is per process: of three kept-alive connections from one address, two workers
      // capped at one each can hold at most two, so at least one must be refused with 429.
      const held: RawConnection[] = [];
      for (let i = 0; i < 3; i++) held.push(await rawConnection(cluster.url, `${get('/healthz', host)}\r\n`));
      const statuses = await Promise.all(held.map((c) => responseOf(c, 5000)));
      expect(
        statuses.every((st) => st === 200 || st === 429),
        statuses.join(),
      ).to.equal(true);
      expect(statuses.filter((st) => st === 429).length, statuses.join()).to.be.at.least(1);
      expect(statuses.filter((st) => st === 200).length, statuses.join()).to.be.at.least(1);
      for (const c of held) c.socket.destroy();
    } finally {
      await stopProcess(cluster.child);
      await admin.close();
    }
  });
});
