// `postern serve` with POSTERN_WORKERS=2: two worker processes on one port and one store, no
// Redis. Connections are spread over the workers, so publishes and streams land on both: every
// stream sees every event at once (the primary relays the live bus), idempotency holds across
// them, a dead worker is replaced, and a stop leaves no process behind.
import { expect } from 'chai';
import { callFresh, clusterFixture, envVars, mailEnv, newProject, startPostern } from '../helpers/harness.ts';
import { register, SseClient } from '../helpers/events-helpers.ts';
import { alive, childPids, spawnPostern, stopProcess } from '../helpers/processes.ts';
import { until } from '../helpers/mail-fixtures.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const postFresh = (url: string, token: string, body: unknown, headers: Record<string, string> = {}) =>
  callFresh('POST', url, token, body, headers);

/** The primary's workers, forked running what the primary runs (bin/launch.mjs). */
const workerPids = (primary: number): number[] => childPids(primary, 'launch.mjs serve');

describe('postern serve with POSTERN_WORKERS=2 (no Redis)', function () {
  this.timeout(60_000);
  const f = clusterFixture({ POSTERN_EVENTS_SETTLE_MS: '100' });

  it('runs two workers behind one port', () => {
    expect(workerPids(f.cluster.child.pid!)).to.have.length(2);
  });

  it('every live stream sees every event at once, whichever worker took the publish', async () => {
    const p = await newProject(f.admin);
    const writer = await p.token(['events:write']);
    const reader = await p.token(['events:read', 'project:read']);
    await register({ ...f.admin, base: f.base }, writer, {
      name: 'ext.spread.sent',
      description: 'x',
      data: [{ name: 'n', type: 'integer' }],
    });
    // Four streams on four connections: both workers hold some.
    const streams = await Promise.all(
      Array.from({ length: 4 }, () => SseClient.open(`${f.base}/events?types=ext.spread.sent`, { token: reader })),
    );
    try {
      const latencies: number[] = [];
      for (let n = 0; n < 30; n++) {
        const sent = performance.now();
        const res = await postFresh(`${f.base}/events`, writer, { type: 'ext.spread.sent', data: { n } });
        expect(res.status, res.body).to.equal(201);
        const { id } = JSON.parse(res.body) as { id: string };
        for (const s of streams) expect(await s.waitUntil(() => s.events().some((e) => e.id === id), 3000), `event ${n}`).to.equal(true);
        latencies.push(performance.now() - sent);
      }
      for (const s of streams) expect(s.events().map((e) => e.data?.n)).to.deep.equal(Array.from({ length: 30 }, (_, i) => i));
      // Relayed by the primary, not found by the once-a-second store check.
      latencies.sort((x, y) => x - y);
      expect(latencies[15]!, `latencies ${latencies.map(Math.round).join(',')}`).to.be.below(200);
    } finally {
      for (const s of streams) s.close();
    }
  });

  it('an Idempotency-Key holds across workers: 40 concurrent retries store one event', async () => {
    const p = await newProject(f.admin);
    const writer = await p.token(['events:write']);
    const reader = await p.token(['events:read', 'project:read']);
    await register({ ...f.admin, base: f.base }, writer, { name: 'ext.once.sent', description: 'x' });
    const results = await Promise.all(
      Array.from({ length: 40 }, () =>
        postFresh(`${f.base}/events`, writer, { type: 'ext.once.sent', subject: 's' }, { 'idempotency-key': 'one-key' }),
      ),
    );
    expect(results.filter((r) => r.status === 201)).to.have.length(1);
    expect(results.filter((r) => r.status === 200)).to.have.length(39);
    expect(new Set(results.map((r) => (JSON.parse(r.body) as { id: string }).id)).size).to.equal(1);
    await sleep(150); // the settle delay
    const page = await callFresh('GET', `${f.base}/events?types=ext.once.sent`, reader);
    expect((JSON.parse(page.body) as { events: unknown[] }).events).to.have.length(1);
  });

  it('replaces a worker that dies, and keeps serving meanwhile', async () => {
    const before = workerPids(f.cluster.child.pid!);
    process.kill(before[0]!, 'SIGKILL');
    // Reaped: the primary knows, and hands no more connections to it. (A connection handed over
    // in the instant before is lost with the worker, as with any crashed server.)
    for (let i = 0; i < 100 && alive(before[0]!); i++) await sleep(20);
    for (let i = 0; i < 20; i++) {
      expect((await callFresh('GET', `${f.cluster.url}/healthz`)).status).to.equal(200);
      await sleep(50);
    }
    let now: number[] = [];
    for (let i = 0; i < 100 && now.length < 2; i++) {
      await sleep(100);
      now = workerPids(f.cluster.child.pid!).filter((pid) => pid !== before[0]);
    }
    expect(now).to.have.length(2);
  });

  it('replaces every worker when all of them die at once', async () => {
    const before = workerPids(f.cluster.child.pid!);
    for (const pid of before) process.kill(pid, 'SIGKILL');
    let now: number[] = [];
    for (let i = 0; i < 150 && now.length < 2; i++) {
      await sleep(100);
      now = workerPids(f.cluster.child.pid!).filter((pid) => !before.includes(pid));
    }
    expect(now).to.have.length(2);
    expect(f.cluster.child.exitCode).to.equal(null);
    // The new workers serve (once started: two at once on a loaded machine take a while).
    await until(
      'a new worker serving',
      async () => (await callFresh('GET', `${f.cluster.url}/healthz`).catch(() => ({ status: 0 }))).status === 200,
      30_000,
    );
    expect((await callFresh('GET', `${f.cluster.url}/healthz`)).status).to.equal(200);
  });

  it('SIGTERM stops the primary and every worker', async () => {
    const pids = workerPids(f.cluster.child.pid!);
    await stopProcess(f.cluster.child);
    expect(f.cluster.child.exitCode).to.equal(0);
    await sleep(100);
    for (const pid of pids) expect(alive(pid), `worker ${pid}`).to.equal(false);
  });
});

describe('postern serve with POSTERN_WORKERS=2: workers that cannot start', function () {
  this.timeout(60_000);
  it('the primary exits 1 with the reason instead of waiting for them', async () => {
    const admin = await startPostern();
    try {
      // An address this machine does not have: every worker fails to listen.
      const started = spawnPostern(envVars(mailEnv(), { ...admin.storeEnv, POSTERN_WORKERS: '2', POSTERN_HOST: '192.0.2.1' }));
      const err = await started.then(
        async (l) => {
          await stopProcess(l.child);
          return null;
        },
        (e: Error) => e,
      );
      expect(err?.message).to.match(/exited with 1/);
      expect(err?.message).to.match(/before listening/);
    } finally {
      await admin.close();
    }
  });
});
