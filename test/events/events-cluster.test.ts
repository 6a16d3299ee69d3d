// Several Postern instances on one store: events published on one instance reach live streams
// on another through Redis within milliseconds, and a Redis restart loses nothing (the gap is
// healed from the store).
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { loadConfig } from '../../lib/config.ts';
import { eventsChannel } from '../../lib/events/live.ts';
import { SYSTEM_ACTOR } from '../../lib/events/log.ts';
import { mailChannel } from '../../lib/mail/live.ts';
import { openPostern, type Postern } from '../../lib/server.ts';
import { envVars, mailEnv, newProject, newStore, startPostern, type TestServer, type TestStore } from '../helpers/harness.ts';
import { addInbox, json, post, register, SseClient } from '../helpers/events-helpers.ts';
import { freePort, spawnPostern, stopProcess } from '../helpers/processes.ts';
import { until } from '../helpers/mail-fixtures.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const percentile = (xs: number[], q: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))]!;

describe('events: two Postern processes and Redis', function () {
  this.timeout(60_000);
  let a: TestServer;
  let b: { child: ChildProcess; base: string };

  before(async () => {
    const redis = mailEnv().redis.url;
    a = await startPostern({ REDIS_URL: redis, POSTERN_EVENTS_SETTLE_MS: '100' });
    const spawned = await spawnPostern(envVars(mailEnv(), { ...a.storeEnv, REDIS_URL: redis, POSTERN_EVENTS_SETTLE_MS: '100' }));
    b = { child: spawned.child, base: `${spawned.url}/v1` };
  });
  after(async () => {
    if (b) await stopProcess(b.child);
    if (a) await a.close();
  });

  it('an event published on A reaches a live stream on B within milliseconds, and back', async () => {
    const p = await newProject(a);
    const inbox = await addInbox(a, p);
    const writer = await p.token(['events:write']);
    const reader = await p.token(['events:read', 'project:read']);
    await register(a, writer, { name: 'ext.ping.sent', description: 'x', data: [{ name: 'n', type: 'integer' }] });
    const onB = await SseClient.open(`${b.base}/events`, { token: reader });
    const onA = await SseClient.open(`${a.base}/events`, { token: reader });
    try {
      const latencies: number[] = [];
      for (let i = 0; i < 40; i++) {
        const sent = performance.now();
        const res = await post(a, writer, { type: 'ext.ping.sent', data: { n: i }, ...(i % 2 ? { inbox } : {}) });
        expect(res.status).to.equal(201);
        const { id } = await json<{ id: string }>(res);
        expect(await onB.waitUntil(() => onB.events().some((e) => e.id === id), 2000), `event ${i} on B`).to.equal(true);
        latencies.push(performance.now() - sent);
      }
      // Published on B (a write through the other process), seen on A.
      const res = await fetch(`${b.base}/events`, {
        method: 'POST',
        headers: { authorization: `Bearer ${writer}`, 'content-type': 'application/json' },
        body: JSON.stringify({ type: 'ext.ping.sent', data: { n: 999 } }),
      });
      expect(res.status).to.equal(201);
      const { id } = (await res.json()) as { id: string };
      expect(await onA.waitUntil(() => onA.events().some((e) => e.id === id), 2000)).to.equal(true);
      expect(await onB.waitUntil(() => onB.events().some((e) => e.id === id), 2000)).to.equal(true);
      expect(onB.events().map((e) => e.data?.n)).to.deep.equal([...Array.from({ length: 40 }, (_, i) => i), 999]);
      // Well under the 1 s store check: this came through Redis.
      expect(percentile(latencies, 0.5), `latencies ${latencies.map(Math.round).join(',')}`).to.be.below(100);
      // Both processes append to one log: sequences stay gap-free across them.
      await sleep(150); // the settle delay
      const page = await fetch(`${b.base}/events?types=ext.*&limit=500`, { headers: { authorization: `Bearer ${reader}` } });
      expect(page.status).to.equal(200);
      const all = (await page.json()) as { events: Array<{ containerid?: string; sequence: string }> };
      expect(all.events).to.have.length(41);
      const project = all.events.filter((e) => !e.containerid).map((e) => Number(e.sequence));
      expect(project).to.deep.equal(project.map((_, i) => i + 1));
    } finally {
      onA.close();
      onB.close();
    }
  });
});

describe('events: a Redis restart is healed from the store', function () {
  this.timeout(60_000);
  let dir: string;
  let port: number;
  let redis: ChildProcess | null = null;
  let store: TestStore;
  const instances: Postern[] = [];

  /** Waits until Redis counts at least `n` subscribers on `channel`: the bus is really listening. */
  async function subscribed(channel: string, n: number, timeoutMs = 10_000): Promise<void> {
    const client = new Redis(port, '127.0.0.1', { maxRetriesPerRequest: 1, lazyConnect: true });
    try {
      await client.connect();
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const [, count] = (await client.pubsub('NUMSUB', channel)) as [string, number];
        if (Number(count) >= n) return;
        if (Date.now() > deadline) throw new Error(`${channel}: ${count} subscribers, wanted ${n}`);
        await sleep(20);
      }
    } finally {
      client.disconnect();
    }
  }

  const logIdOf = (postern: Postern): Promise<string> => postern.store.events.logId();

  async function startRedis(): Promise<void> {
    redis = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir], {
      stdio: 'ignore',
    });
    for (let i = 0; i < 100; i++) {
      const up = await new Promise<boolean>((resolve) => {
        const sock = createServer();
        sock.once('error', () => resolve(true)); // the port is taken: Redis listens
        sock.listen(port, '127.0.0.1', () => sock.close(() => resolve(false)));
      });
      if (up) return;
      await sleep(50);
    }
    throw new Error('redis-server did not start');
  }

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'postern-redis-'));
    store = await newStore(dir);
    port = await freePort();
    await startRedis();
  });
  after(async () => {
    for (const i of instances) await i.close();
    if (redis && redis.exitCode === null) {
      redis.kill('SIGTERM');
      await once(redis, 'exit');
    }
    await store?.drop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('events recorded while Redis is down reach the other instance; fan-out resumes after', async () => {
    const vars = envVars(mailEnv(), { ...store.env, REDIS_URL: `redis://127.0.0.1:${port}`, POSTERN_EVENTS_SETTLE_MS: '0' });
    for (let i = 0; i < 2; i++) {
      const config = loadConfig(vars);
      const postern = await openPostern(config, pino({ level: 'silent' }));
      instances.push(postern);
    }
    const [one, two] = instances as [Postern, Postern];
    await one.listen();
    const { url } = await two.listen();
    const s = { postern: one, storeEnv: store.env, base: '', app: '', url: '', dir, close: async () => undefined };
    const p = await newProject(s);
    const inbox = await addInbox(s, p);
    const reader = await p.token(['events:read']);
    const client = await SseClient.open(`${url}/v1/events`, { token: reader });
    const record = (n: number) =>
      one.events.record({
        type: 'message.received',
        projectId: p.projectId,
        inboxId: inbox,
        actor: SYSTEM_ACTOR,
        data: { msgId: `msg_${String(n).padStart(26, '0')}` },
      });
    try {
      const first = await record(1);
      expect(await client.waitUntil(() => client.frames.length === 1, 2000)).to.equal(true);
      // Redis goes away; events keep being recorded on instance one.
      redis!.kill('SIGKILL');
      await once(redis!, 'exit');
      const during = [await record(2), await record(3), await record(4)];
      await startRedis();
      expect(await client.waitUntil(() => client.frames.length === 4, 10_000), `got ${client.frames.length}`).to.equal(true);
      // Once both subscribers are back, Redis delivers again. Instance two's store check is off
      // meanwhile, so each delivery proves it (a latency bound against the 1 s check could not
      // tell the two apart on a loaded machine).
      const channel = eventsChannel(await logIdOf(one));
      await subscribed(channel, 2);
      // Instance one's publisher reconnects on its own backoff, maybe after the subscribers: until
      // it does, its publishes fail and only the store check delivers. A message at a position
      // already delivered is skipped by the receivers.
      await until(
        'instance one publishing again',
        async () =>
          one.bus.publish(channel, '1 {}').then(
            () => true,
            () => false,
          ),
        10_000,
      );
      const live = two.events.live;
      live.heal = () => undefined;
      const later = [];
      try {
        for (let i = 0; i < 5; i++) {
          later.push(await record(5 + i));
          expect(await client.waitUntil(() => client.frames.length === 5 + i, 3000), `event ${5 + i} through Redis`).to.equal(true);
        }
      } finally {
        delete (live as { heal?: unknown }).heal;
      }
      expect(client.events().map((e) => e.id)).to.deep.equal([first, ...during, ...later].map((r) => r.eventId));
    } finally {
      client.close();
    }
  });
  it('inbox streams end with a reason after a Redis gap, so their clients read again', async () => {
    const vars = envVars(mailEnv(), { ...store.env, REDIS_URL: `redis://127.0.0.1:${port}`, POSTERN_STREAM_HEARTBEAT_MS: '50' });
    // Postern's warnings, to see when it has noticed that Redis is gone.
    const warnings: string[] = [];
    const postern = await openPostern(loadConfig(vars), pino({ level: 'warn' }, { write: (line: string) => void warnings.push(line) }));
    instances.push(postern);
    const { url } = await postern.listen();
    const s = { postern, storeEnv: store.env, base: `${url}/v1`, app: `${url}/api/v1`, url, dir, close: async () => undefined };
    const p = await newProject(s);
    const inbox = await p.inbox();
    const reader = await p.token(['messages:read']);
    const stream = await SseClient.open(`${url}/v1/inboxes/${inbox.id}/events`, { token: reader });
    try {
      await subscribed(mailChannel(await logIdOf(postern)), 1);
      redis!.kill('SIGKILL');
      await once(redis!, 'exit');
      // Postern noticed the outage (its subscriber warned), and the stream still sends heartbeats
      // after that: it stays open while Redis is down.
      expect(
        await stream.waitUntil(() => warnings.some((w) => w.includes('redis bus unavailable') && w.includes('subscriber')), 10_000),
        'the outage was noticed',
      ).to.equal(true);
      const beats = stream.comments;
      expect(await stream.waitUntil(() => stream.comments >= beats + 2, 5000), 'heartbeats go on').to.equal(true);
      expect(stream.ended, 'still open while Redis is down').to.equal(false);
      await startRedis();
      expect(await stream.waitUntil(() => stream.ended, 10_000), 'ended after the reconnect').to.equal(true);
      const last = stream.frames.at(-1);
      expect(last?.event).to.equal('error');
      expect((JSON.parse(last!.data) as { error: string }).error).to.match(/missed/);
    } finally {
      stream.close();
    }
  });
});

describe('events: Redis configured but down at start', function () {
  this.timeout(30_000);
  it('Postern starts anyway; its own streams are live and other instances catch up from the store', async () => {
    const port = await freePort(); // nothing listens there
    const a = await startPostern({ REDIS_URL: `redis://127.0.0.1:${port}`, POSTERN_EVENTS_SETTLE_MS: '0' });
    const second = await openPostern(
      loadConfig(envVars(mailEnv(), { ...a.storeEnv, REDIS_URL: `redis://127.0.0.1:${port}` })),
      pino({ level: 'silent' }),
    );
    try {
      const { url } = await second.listen();
      const p = await newProject(a);
      const inbox = await addInbox(a, p);
      const reader = await p.token(['events:read']);
      const onA = await SseClient.open(`${a.base}/events`, { token: reader });
      const onB = await SseClient.open(`${url}/v1/events`, { token: reader });
      const r = await a.postern.events.record({
        type: 'message.received',
        projectId: p.projectId,
        inboxId: inbox,
        actor: SYSTEM_ACTOR,
        data: { msgId: `msg_${'0'.repeat(26)}` },
      });
      expect(await onA.waitUntil(() => onA.frames.length === 1, 1000)).to.equal(true);
      expect(await onB.waitUntil(() => onB.frames.length === 1, 3000)).to.equal(true);
      expect(onB.events()[0]!.id).to.equal(r.eventId);
      onA.close();
      onB.close();
    } finally {
      await second.close();
      await a.close();
    }
  });
});
