// Prometheus metrics (docs/operations.md, "Metrics"): after real traffic (reads, a
// delivery through Postfix and Dovecot's push hint, a send, streams, a webhook), a scrape of
// POSTERN_METRICS_LISTEN has every family with its labels, no id in any label, and the public
// port does not serve it. With POSTERN_WORKERS=2 the primary serves every worker's as one.
import { expect } from 'chai';
import {
  callFresh,
  call,
  envVars,
  json,
  mailEnv,
  newProject,
  startPostern,
  clusterFixture,
  type TestInbox,
  type TestServer,
} from '../helpers/harness.ts';
import { SseClient } from '../helpers/events-helpers.ts';
import { append, deliver, mailApp, openInboxStream, until, type SseReader } from '../helpers/mail-fixtures.ts';
import { createServer } from 'node:net';
import { once } from 'node:events';
import { freePort, runPostern } from '../helpers/processes.ts';
import { postRaw, rcpt, atSink } from '../helpers/send-fixtures.ts';
import { Receiver } from '../helpers/webhook-receiver.ts';

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** The exposition text's samples (comments and blank lines skipped). */
function parse(text: string): Sample[] {
  const out: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) throw new Error(`not an exposition line: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!;
    out.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return out;
}

/** The samples of `name` whose labels include `labels`. */
function find(samples: Sample[], name: string, labels: Record<string, string> = {}): Sample[] {
  return samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
}

function value(samples: Sample[], name: string, labels: Record<string, string> = {}): number {
  const found = find(samples, name, labels);
  expect(found, `${name}${JSON.stringify(labels)} in the scrape`).to.have.length.greaterThan(0);
  return found.reduce((n, s) => n + s.value, 0);
}

async function scrape(metricsUrl: string): Promise<{ text: string; samples: Sample[] }> {
  const res = await fetch(metricsUrl);
  expect(res.status).to.equal(200);
  expect(res.headers.get('content-type')).to.match(/^text\/plain; version=0\.0\.4/);
  const text = await res.text();
  return { text, samples: parse(text) };
}

/** Ids Postern mints (lib/ids.ts): none may be a label value. */
const ID = /\b(?:prj|mem|ibx|tok|msg|evt|whk|lbl|ses)_[0-9A-Za-z]{10,}/;

describe('metrics', function () {
  this.timeout(120_000);

  describe('one process', () => {
    let s: TestServer;
    let metricsUrl: string;
    let receiver: Receiver;
    const streams: Array<{ close(): unknown }> = [];

    before(async () => {
      const { hints } = mailEnv();
      metricsUrl = `http://127.0.0.1:${await freePort()}/metrics`;
      receiver = await new Receiver().start();
      s = await startPostern({
        POSTERN_METRICS_LISTEN: new URL(metricsUrl).host,
        POSTERN_WATCH: 'push',
        POSTERN_HINT_LISTEN: hints.listen,
        POSTERN_HINT_SECRET: hints.secret,
        POSTERN_WATCH_SWEEP_MS: '500',
        POSTERN_EVENTS_SETTLE_MS: '0',
        // One connection per inbox: concurrent reads of one inbox wait for it (the pool's waits).
        POSTERN_IMAP_MAX_PER_INBOX: '1',
        POSTERN_WEBHOOK_ALLOW_HTTP_LOOPBACK: '1',
        POSTERN_WEBHOOK_ALLOW: '127.0.0.1/32',
        POSTERN_WEBHOOK_POLL_MS: '100',
      });
    });
    after(async () => {
      for (const stream of streams) await stream.close();
      await s?.close();
      await receiver?.close();
    });

    it('after traffic, a scrape has every family with its labels, and no id as a label', async () => {
      const p = await newProject(s);
      const inbox: TestInbox = await p.inbox();
      const sealed = await p.inbox({ mode: 'zero-access' });
      const token = await p.token(['messages:read', 'send', 'events:read', 'webhooks:write', 'project:read']);
      const hook = await call(`${s.base}/webhooks`, {
        method: 'POST',
        token,
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ url: receiver.url }),
      });
      expect(hook.status, await hook.clone().text()).to.equal(201);
      receiver.secrets = [(await json<{ secret: string }>(hook)).secret];

      // Streams of both kinds, open while the scrape is taken.
      const events = await SseClient.open(`${s.base}/events`, { token });
      streams.push(events);
      const inboxStream: SseReader = await openInboxStream(s.base, inbox, token);
      streams.push(inboxStream);

      // Mail through Postfix and Dovecot: its push hint, a sync pass, message.added, a webhook delivery.
      await deliver(inbox.address, { subject: 'counted' });
      await inboxStream.next((e) => e.event === 'message.added');
      await until('the webhook delivery', async () => receiver.received.length > 0);
      // Plaintext a mail app puts into the zero-access inbox (sealed soon after: only the family is asserted).
      const app = await mailApp(sealed);
      await append(app, 'INBOX', { subject: 'plaintext at rest' });
      await app.logout();

      // Reads: a list, then the message's raw source four times at once over one connection.
      const labels = await json<{ labels: Array<{ id: string; name: string }> }>(
        await call(`${s.base}/inboxes/${inbox.id}/labels`, { token }),
      );
      const inboxLabel = labels.labels.find((l) => l.name === 'INBOX')!;
      const list = await call(`${s.base}/inboxes/${inbox.id}/labels/${inboxLabel.id}/messages`, { token });
      expect(list.status).to.equal(200);
      const { messages } = await json<{ messages: Array<{ id: string }> }>(list);
      const raws = await Promise.all(
        Array.from({ length: 4 }, () => call(`${s.base}/inboxes/${inbox.id}/messages/${messages[0]!.id}/raw`, { token })),
      );
      for (const r of raws) expect(r.status).to.equal(200);
      expect((await call(`${s.base}/events?limit=10`, { token })).status).to.equal(200);
      // A path no route has, with an id in it: counted, but under a fixed label.
      expect((await call(`${s.base}/nothing/${inbox.id}`, { token })).status).to.equal(404);
      // Refused before its route ran (no credential), and a method the route has not: the route's template still.
      expect((await call(`${s.base}/inboxes/${inbox.id}/labels`)).status).to.equal(401);
      expect((await call(`${s.base}/inboxes/${inbox.id}/labels`, { method: 'DELETE', token })).status).to.equal(405);
      // A send through Postfix.
      const to = rcpt();
      const raw = `From: ${inbox.address}\r\nTo: ${to}\r\nSubject: measured\r\n\r\nhello\r\n`;
      const sent = await postRaw(s, token, inbox.id, { from: inbox.address, to: [to], raw });
      expect(sent.status, await sent.clone().text()).to.equal(200);
      await atSink(to);
      await until('a sweep', async () => s.postern.watchAll.stats.sweeps > 0);

      const { text, samples } = await scrape(metricsUrl);
      expect(text.match(ID), 'an id in the scrape').to.equal(null);

      // Default process metrics.
      expect(value(samples, 'process_cpu_user_seconds_total')).to.be.greaterThan(0);
      expect(value(samples, 'nodejs_heap_size_used_bytes')).to.be.greaterThan(0);
      // HTTP by method, route template and status.
      const routes = new Set(
        find(samples, 'http_request_duration_seconds_count').map((x) => `${x.labels.method} ${x.labels.route} ${x.labels.status}`),
      );
      expect([...routes], [...routes].join('\n')).to.include.members([
        'GET /v1/inboxes/:inbox/labels/:label/messages 200',
        'GET /v1/inboxes/:inbox/messages/:msg/raw 200',
        'GET /v1/events 200',
        'POST /v1/inboxes/:inbox/messages 200',
        'POST /v1/webhooks 201',
        'GET unmatched 404',
        'GET /v1/inboxes/:inbox/labels 401',
        'DELETE /v1/inboxes/:inbox/labels 405',
      ]);
      expect(
        value(samples, 'http_request_duration_seconds_bucket', { method: 'GET', route: 'unmatched', status: '404', le: '+Inf' }),
      ).to.equal(1);
      // IMAP connections by state, and the pool's waits.
      for (const state of ['busy', 'idle', 'opening', 'watching'])
        expect(find(samples, 'postern_imap_connections', { state }), state).to.have.length(1);
      expect(value(samples, 'postern_imap_pool_wait_seconds_count', { outcome: 'acquired' })).to.be.greaterThan(0);
      expect(value(samples, 'postern_imap_pool_waiting')).to.be.at.least(0);
      // Watching: inboxes, hints, sweeps, lost hints.
      expect(value(samples, 'postern_watched_inboxes', { mode: 'push' })).to.be.at.least(2);
      expect(value(samples, 'postern_push_hints_total', { outcome: 'taken' })).to.be.greaterThan(0);
      expect(value(samples, 'postern_sweep_duration_seconds_count')).to.be.greaterThan(0);
      expect(value(samples, 'postern_sweep_lost_hints_total')).to.be.at.least(0);
      // Sync passes and the index's lag.
      expect(value(samples, 'postern_sync_passes_total', { outcome: 'ok' })).to.be.greaterThan(0);
      expect(value(samples, 'postern_index_lag_seconds_count')).to.be.greaterThan(0);
      // The event log: appends, reads, readers; streams by kind.
      expect(value(samples, 'postern_event_appends_total', { origin: 'builtin', outcome: 'appended' })).to.be.greaterThan(0);
      expect(value(samples, 'postern_event_reads_total', { kind: 'page' })).to.be.greaterThan(0);
      expect(value(samples, 'postern_event_log_readers')).to.be.at.least(2);
      expect(value(samples, 'postern_sse_streams', { kind: 'events' })).to.equal(1);
      expect(value(samples, 'postern_sse_streams', { kind: 'inbox' })).to.equal(1);
      // Sends by outcome and the relay's latency.
      expect(value(samples, 'postern_sends_total', { outcome: 'accepted' })).to.equal(1);
      expect(value(samples, 'postern_relay_duration_seconds_count', { outcome: 'accepted' })).to.equal(1);
      // The store's two: the unsealed backlog and the webhook queue's age.
      expect(value(samples, 'postern_unsealed_messages')).to.be.at.least(0);
      expect(value(samples, 'postern_webhook_queue_age_seconds')).to.be.at.least(0);
      expect(value(samples, 'postern_webhook_deliveries_total', { outcome: 'delivered' })).to.be.greaterThan(0);
      // Kept reads: PostgreSQL's, served once its listening connection is heard (docs/deployment.md).
      if (s.postern.store.engine === 'postgres') {
        await until('kept reads served', async () => value((await scrape(metricsUrl)).samples, 'postern_store_kept_reads_served') === 1);
      } else {
        expect(find(samples, 'postern_store_kept_reads_served')).to.deep.equal([]);
      }

      // Once the streams end, they are no longer counted.
      for (const stream of streams.splice(0)) await stream.close();
      await until('the streams counted out', async () => {
        const after = (await scrape(metricsUrl)).samples;
        return (
          value(after, 'postern_sse_streams', { kind: 'events' }) === 0 && value(after, 'postern_sse_streams', { kind: 'inbox' }) === 0
        );
      });
    });

    it('the unsealed backlog counts plaintext waiting in a zero-access inbox', async () => {
      const p = await newProject(s);
      const sealed = await p.inbox({ mode: 'zero-access' });
      // Sealing stopped for good (this server seals nothing more), so the plaintext waits.
      await s.postern.resealer.close();
      const before = value((await scrape(metricsUrl)).samples, 'postern_unsealed_messages');
      const app = await mailApp(sealed);
      await append(app, 'INBOX', { subject: 'plaintext 1' });
      await append(app, 'INBOX', { subject: 'plaintext 2' });
      await app.logout();
      await until(
        'the backlog in the scrape',
        async () => value((await scrape(metricsUrl)).samples, 'postern_unsealed_messages') === before + 2,
      );
    });

    it('the public port does not serve the metrics', async () => {
      for (const path of ['/metrics', '/v1/metrics', '/api/v1/metrics']) {
        const res = await fetch(`${s.url}${path}`);
        const text = await res.text();
        expect(res.status, path).to.be.oneOf([401, 404]);
        expect(text, path).to.not.include('http_request_duration_seconds');
      }
      // And the metrics listener serves nothing else.
      expect((await fetch(new URL('/v1/inboxes', metricsUrl))).status).to.equal(404);
    });

    it('without POSTERN_METRICS_LISTEN no metrics are kept', async () => {
      const off = await startPostern();
      try {
        expect(off.postern.metrics).to.equal(null);
        expect((await fetch(`${off.url}/metrics`)).status).to.equal(404);
      } finally {
        await off.close();
      }
    });
  });

  it('an address in use stops `postern serve` with the reason, alone or with workers', async () => {
    const taken = createServer();
    taken.listen(0, '127.0.0.1');
    await once(taken, 'listening');
    const { port } = taken.address() as { port: number };
    const admin = await startPostern();
    try {
      for (const workers of ['1', '2']) {
        const run = await runPostern(
          ['serve'],
          envVars(mailEnv(), {
            ...admin.storeEnv,
            POSTERN_PORT: '0',
            POSTERN_WORKERS: workers,
            POSTERN_METRICS_LISTEN: `127.0.0.1:${port}`,
          }),
        );
        expect(run.code, `workers=${workers}: ${run.stdout} ${run.stderr}`).to.equal(1);
        expect(run.out.error, `workers=${workers}`).to.match(
          new RegExp(`^POSTERN_METRICS_LISTEN: cannot listen on 127\\.0\\.0\\.1:${port}: .*EADDRINUSE`),
        );
      }
    } finally {
      taken.close();
      await admin.close();
    }
  });

  describe('two workers (POSTERN_WORKERS=2)', () => {
    let metricsUrl = '';
    const extra: Record<string, string> = {};
    before(async () => {
      metricsUrl = `http://127.0.0.1:${await freePort()}/metrics`;
      extra.POSTERN_METRICS_LISTEN = new URL(metricsUrl).host;
    });
    const f = clusterFixture(extra);

    it("the primary serves every worker's metrics as one, and the public port does not", async () => {
      const p = await newProject(f.admin);
      const token = await p.token(['messages:read']);
      // On connections of their own, so the kernel spreads them over the workers.
      const N = 24;
      for (let i = 0; i < N; i++) expect((await callFresh('GET', `${f.base}/inboxes`, token)).status).to.equal(200);
      const { text, samples } = await scrape(metricsUrl);
      expect(text.match(ID)).to.equal(null);
      // Summed over the workers: every request once, whichever served it.
      expect(value(samples, 'http_request_duration_seconds_count', { method: 'GET', route: '/v1/inboxes', status: '200' })).to.equal(N);
      // Both workers answered, as one exposition: one sample per series.
      expect(value(samples, 'postern_processes')).to.equal(2);
      expect(find(samples, 'postern_watched_inboxes')).to.have.length(1);
      expect(find(samples, 'nodejs_heap_size_used_bytes')).to.have.length(1);
      const again = (await scrape(metricsUrl)).samples;
      expect(value(again, 'http_request_duration_seconds_count', { method: 'GET', route: '/v1/inboxes', status: '200' })).to.equal(N);
      expect((await callFresh('GET', `${f.cluster.url}/metrics`)).status).to.equal(404);
    });
  });
});
