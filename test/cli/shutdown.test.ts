// `postern serve` on SIGTERM (docs/operations.md, "Health and shutdown"): it stops accepting
// connections, ends event streams with a reconnect hint, lets a request under way finish within
// POSTERN_SHUTDOWN_GRACE_MS, then exits 0; what is still running at the end of the grace is cut.
import { expect } from 'chai';
import { randomBytes } from 'node:crypto';
import { createSocket } from 'node:dgram';
import { once } from 'node:events';
import { request, type ClientRequest, type IncomingMessage } from 'node:http';
import { connect } from 'node:net';
import { envVars, mailEnv, newProject, startPostern, type TestServer } from '../helpers/harness.ts';
import { freePort, spawnPostern, stopProcess, type Listening } from '../helpers/processes.ts';
import { atSink, rcpt } from '../helpers/send-fixtures.ts';
import { until } from '../helpers/mail-fixtures.ts';
import { FAST, project } from '../helpers/webhook-api.ts';

/** A live stream read as text: `text` grows until the server ends it (`ended`). */
interface OpenStream {
  text: string;
  ended: Promise<void>;
}

async function openStream(url: string, token: string): Promise<OpenStream> {
  const req = request(url, { agent: false, headers: { authorization: `Bearer ${token}`, accept: 'text/event-stream' } });
  req.end();
  const [res] = (await once(req, 'response')) as [IncomingMessage];
  expect(res.statusCode).to.equal(200);
  const stream: OpenStream = { text: '', ended: once(res, 'end').then(() => undefined) };
  res.on('data', (d: Buffer) => (stream.text += d.toString()));
  // Open once its first field (the initial retry) arrived.
  while (!stream.text.includes('\n\n')) await once(res, 'data');
  return stream;
}

/**
 * A POST whose body is held back: resolves once the server has its headers (it answered
 * `100 Continue`), so the request is under way there; `finish` sends the rest.
 */
async function heldPost(
  url: string,
  token: string,
  body: Buffer,
): Promise<{ req: ClientRequest; finish: () => Promise<{ status: number; connection: string | undefined; body: string }> }> {
  const req = request(url, {
    method: 'POST',
    agent: false,
    headers: {
      authorization: `Bearer ${token}`,
      'content-type': 'application/json',
      'content-length': String(body.length),
      expect: '100-continue',
    },
  });
  req.on('error', () => undefined);
  const responded = once(req, 'response') as Promise<[IncomingMessage]>;
  // A request cut by the server never gets its response: only `finish` cares.
  responded.catch(() => undefined);
  req.flushHeaders();
  await once(req, 'continue');
  req.write(body.subarray(0, body.length >> 1));
  return {
    req,
    async finish() {
      req.end(body.subarray(body.length >> 1));
      const [res] = await responded;
      let text = '';
      for await (const chunk of res) text += (chunk as Buffer).toString();
      return { status: res.statusCode ?? 0, connection: res.headers.connection, body: text };
    },
  };
}

function refused(url: string): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = connect({ host: hostname, port: Number(port) });
    socket.on('connect', () => {
      socket.destroy();
      resolve('connected');
    });
    socket.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
  });
}

function exited(served: Listening): Promise<{ code: number | null; at: number }> {
  return once(served.child, 'exit').then(([code]) => ({ code: code as number | null, at: Date.now() }));
}

describe('postern serve on SIGTERM', function () {
  this.timeout(120_000);
  let admin: TestServer;
  let served: Listening | null = null;
  before(async () => {
    admin = await startPostern();
  });
  afterEach(async () => {
    if (served) await stopProcess(served.child);
    served = null;
  });
  after(() => admin.close());

  it('refuses new connections, ends streams with a retry hint, finishes the send under way and exits 0', async () => {
    const p = await newProject(admin);
    const box = await p.inbox();
    const token = await p.token(['messages:read', 'send']);
    served = await spawnPostern(envVars(mailEnv(), { ...admin.storeEnv, POSTERN_SHUTDOWN_GRACE_MS: '60000' }));
    const base = `${served.url}/v1`;
    const stream = await openStream(`${base}/inboxes/${box.id}/events`, token);
    const to = rcpt('drain');
    const raw = `From: ${box.address}\r\nTo: ${to}\r\nSubject: sent while stopping\r\nMessage-ID: <${randomBytes(8).toString('hex')}@postern.test>\r\n\r\nStill delivered.\r\n`;
    const send = await heldPost(
      `${base}/inboxes/${box.id}/messages`,
      token,
      Buffer.from(JSON.stringify({ from: box.address, to: [to], raw: Buffer.from(raw).toString('base64') })),
    );
    const exit = exited(served);

    const signalled = Date.now();
    served.child.kill('SIGTERM');
    // The stream is told when to come back and ended; the listener is closed by then.
    await stream.ended;
    const retries = stream.text.match(/^retry: \d+$/gm) ?? [];
    expect(retries, stream.text).to.have.length(2);
    expect(Number(retries[1]!.slice(7))).to.be.within(1000, 2000);
    expect(await refused(served.url)).to.equal('ECONNREFUSED');

    // The send under way was not cut: it completes, and its connection is not kept.
    const answer = await send.finish();
    expect(answer.status, answer.body).to.equal(200);
    expect(answer.connection).to.equal('close');
    await atSink(to);
    const { code, at } = await exit;
    expect(code).to.equal(0);
    // Nothing was left to wait for: it did not sit out the 60 s grace.
    expect(at - signalled).to.be.below(20_000);
  });

  it('with POSTERN_WORKERS=2, each worker drains the same way: its stream gets the retry hint, and the primary exits 0', async () => {
    const p = await newProject(admin);
    const box = await p.inbox();
    const token = await p.token(['messages:read']);
    served = await spawnPostern(envVars(mailEnv(), { ...admin.storeEnv, POSTERN_WORKERS: '2', POSTERN_PORT: String(await freePort()) }));
    const stream = await openStream(`${served.url}/v1/inboxes/${box.id}/events`, token);
    const exit = exited(served);
    served.child.kill('SIGTERM');
    await stream.ended;
    expect(stream.text.match(/^retry: \d+$/gm), stream.text).to.have.length(2);
    expect((await exit).code).to.equal(0);
  });

  it('cuts a request still under way when POSTERN_SHUTDOWN_GRACE_MS is over, and exits 0', async () => {
    const p = await newProject(admin);
    const box = await p.inbox();
    const token = await p.token(['messages:read', 'send']);
    served = await spawnPostern(envVars(mailEnv(), { ...admin.storeEnv, POSTERN_SHUTDOWN_GRACE_MS: '1500' }));
    // Its body never comes: only the end of the grace ends it.
    const stuck = await heldPost(`${served.url}/v1/inboxes/${box.id}/messages`, token, Buffer.alloc(1000, 'x'));
    // Not once(): the request fails ('socket hang up') before it closes, and that is expected.
    const cut = new Promise((resolve) => stuck.req.on('close', resolve));
    const exit = exited(served);
    const signalled = Date.now();
    served.child.kill('SIGTERM');
    const { code, at } = await exit;
    await cut;
    expect(code).to.equal(0);
    expect(at - signalled).to.be.within(1500, 12_000);
  });

  it('exits at once while webhook hosts wait on a name server that never answers', async () => {
    // A name server that reads every query and answers none; the lookups it got, counted.
    const silent = createSocket('udp4');
    let asked = 0;
    silent.on('message', () => asked++);
    silent.bind(0, '127.0.0.1');
    await once(silent, 'listening');
    try {
      const A = await project(admin);
      // More names than the project's one lookup at a time: the rest wait their turn.
      for (let i = 0; i < 8; i++) {
        const res = await A.a.send('POST', '/webhooks', { url: `https://hang-stop-${i}.example.test/hook`, types: ['ext.*'] });
        expect(res.status, await res.clone().text()).to.equal(201);
      }
      served = await spawnPostern(
        envVars(mailEnv(), {
          ...admin.storeEnv,
          ...FAST,
          POSTERN_WEBHOOK_TIMEOUT_MS: '60000',
          POSTERN_WEBHOOK_LEASE_MS: '120000',
          POSTERN_WEBHOOK_DNS_SERVERS: `127.0.0.1:${silent.address().port}`,
          // Each name waits 2 × 5 s before it fails: eight in turn would be over a minute.
          POSTERN_WEBHOOK_DNS_TIMEOUT_MS: '5000',
          POSTERN_WEBHOOK_DNS_TRIES: '2',
          POSTERN_WEBHOOK_DNS_PER_PROJECT: '1',
        }),
      );
      // Published through the spawned server, whose dispatcher hears of it first.
      const res = await fetch(`${served.url}/v1/events`, {
        method: 'POST',
        headers: { authorization: `Bearer ${A.token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ type: 'ext.order.shipped', data: { orderId: 'o-stop' } }),
      });
      expect(res.status, await res.text()).to.equal(201);
      await until('the name server asked', async () => asked > 0, 20_000);
      const exit = exited(served);
      const signalled = Date.now();
      served.child.kill('SIGTERM');
      const { code, at } = await exit;
      expect(code).to.equal(0);
      // The grace of deliveries under way (2 s) and the store's close, not the lookups' turns.
      expect(at - signalled).to.be.below(9000);
    } finally {
      silent.close();
    }
  });
});
