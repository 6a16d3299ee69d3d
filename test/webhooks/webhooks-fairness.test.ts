// One project's webhooks cannot hold another's back (docs/webhooks.md, "Bounds"): endpoints on
// hosts whose name server never answers stall neither the process's other name lookups (GET
// /readyz) nor another project's deliveries, and their failures are kept (the name server sees a
// bounded number of queries); a project's slow receivers that do answer 200 take only its share
// of the attempts under way, so another project's deliveries keep their pace; and a project whose
// receivers never answer has no more deliveries made than it can send (its events wait in the log,
// not as rows written for every endpoint), and gets every one once its receivers answer again.
import { createSocket, type Socket } from 'node:dgram';
import { lookup } from 'node:dns/promises';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { WebhookDns, WebhookDnsError } from '../../adapters/webhooks/dns.ts';
import { startPostern, type TestServer } from '../helpers/harness.ts';
import { until } from '../helpers/mail-fixtures.ts';
import { FAST, project, receiverPool } from '../helpers/webhook-api.ts';
import type { Receiver } from '../helpers/webhook-receiver.ts';

/**
 * A name server on loopback: names starting `hang-` get no answer at all (a server that drops
 * queries); any other name gets A `address` (TTL `ttl`) and an empty answer for AAAA.
 */
class FakeDns {
  private socket: Socket | null = null;
  /** Queries received, by name. */
  readonly queries: string[] = [];
  address = '93.184.215.14';
  ttl = 300;
  port = 0;

  async start(): Promise<this> {
    const socket = (this.socket = createSocket('udp4'));
    socket.on('message', (msg, from) => {
      const { name, end } = readName(msg, 12);
      this.queries.push(name);
      if (name.startsWith('hang-')) return;
      const qtype = msg.readUInt16BE(end);
      const question = msg.subarray(12, end + 4);
      const answers = qtype === 1 ? 1 : 0;
      const header = Buffer.alloc(12);
      msg.copy(header, 0, 0, 2);
      header.writeUInt16BE(0x8180, 2); // a response, recursion available, no error
      header.writeUInt16BE(1, 4);
      header.writeUInt16BE(answers, 6);
      const parts = [header, question];
      if (answers) {
        const rr = Buffer.alloc(16);
        rr.writeUInt16BE(0xc00c, 0); // the name: the question's
        rr.writeUInt16BE(1, 2);
        rr.writeUInt16BE(1, 4);
        rr.writeUInt32BE(this.ttl, 6);
        rr.writeUInt16BE(4, 10);
        this.address.split('.').forEach((b, i) => rr.writeUInt8(Number(b), 12 + i));
        parts.push(rr);
      }
      socket.send(Buffer.concat(parts), from.port, from.address);
    });
    socket.bind(0, '127.0.0.1');
    await once(socket, 'listening');
    this.port = socket.address().port;
    return this;
  }

  count(prefix: string): number {
    return this.queries.filter((q) => q.startsWith(prefix)).length;
  }

  close(): void {
    this.socket?.close();
  }
}

function readName(msg: Buffer, at: number): { name: string; end: number } {
  const labels: string[] = [];
  while (msg[at]! > 0) {
    labels.push(msg.subarray(at + 1, at + 1 + msg[at]!).toString('ascii'));
    at += 1 + msg[at]!;
  }
  return { name: labels.join('.').toLowerCase(), end: at + 1 };
}

describe('webhook hosts: resolved off the thread pool, failures kept, a share per project', function () {
  this.timeout(60_000);
  let dns: FakeDns;
  let dir: string;
  before(async () => {
    dns = await new FakeDns().start();
    dir = mkdtempSync(join(tmpdir(), 'postern-dns-'));
  });
  after(() => {
    dns.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('answers /etc/hosts names, localhost and literals without asking the server; keeps answers and failures', async () => {
    const hostsFile = join(dir, 'hosts');
    writeFileSync(hostsFile, '# comment\n127.0.0.1 localhost\n10.9.8.7 Receiver.Internal receiver-alias # trailing\n::1 ip6-localhost\n');
    let clock = 1_000_000;
    const r = new WebhookDns({
      servers: [`127.0.0.1:${dns.port}`],
      timeoutMs: 200,
      tries: 1,
      negativeTtlMs: 60_000,
      perProject: 4,
      hostsFile,
      now: () => clock,
    });
    try {
      expect(await r.resolve('localhost')).to.deep.equal([{ address: '127.0.0.1', family: 4 }]);
      expect(await r.resolve('receiver.internal.')).to.deep.equal([{ address: '10.9.8.7', family: 4 }]);
      expect(await r.resolve('RECEIVER-ALIAS')).to.deep.equal([{ address: '10.9.8.7', family: 4 }]);
      expect(await r.resolve('ip6-localhost')).to.deep.equal([{ address: '::1', family: 6 }]);
      expect(await r.resolve('shop.localhost')).to.deep.equal([
        { address: '::1', family: 6 },
        { address: '127.0.0.1', family: 4 },
      ]);
      expect(await r.resolve('192.0.2.1')).to.deep.equal([{ address: '192.0.2.1', family: 4 }]);
      expect(dns.queries).to.deep.equal([]);

      dns.ttl = 30;
      expect(await r.resolve('hooks.example.test')).to.deep.equal([{ address: '93.184.215.14', family: 4 }]);
      expect(dns.count('hooks.')).to.equal(2); // A and AAAA
      clock += 29_000;
      await r.resolve('hooks.example.test');
      expect(dns.count('hooks.'), 'kept for its TTL').to.equal(2);
      clock += 2000;
      await r.resolve('hooks.example.test');
      expect(dns.count('hooks.'), 'asked again once the TTL is over').to.equal(4);

      const err = await r.resolve('hang-kept.example.test').then(
        () => null,
        (e: unknown) => e,
      );
      expect(err).to.be.instanceOf(WebhookDnsError);
      expect((err as WebhookDnsError).code).to.equal('ETIMEOUT');
      const asked = dns.count('hang-kept');
      expect(asked).to.be.within(1, 2);
      clock += 59_000;
      expect(await r.resolve('hang-kept.example.test').catch((e: unknown) => e)).to.equal(err);
      expect(dns.count('hang-kept'), 'a failure is kept').to.equal(asked);
      clock += 2000;
      await r.resolve('hang-kept.example.test').catch(() => undefined);
      expect(dns.count('hang-kept'), 'and asked again after').to.be.above(asked);
    } finally {
      r.close();
    }
  });

  it("many names that never answer: the thread pool stays free, one query per name, another project's lookups not queued behind them", async () => {
    const r = new WebhookDns({
      servers: [`127.0.0.1:${dns.port}`],
      timeoutMs: 1500,
      tries: 1,
      negativeTtlMs: 60_000,
      perProject: 4,
      hostsFile: join(dir, 'none'),
    });
    try {
      // 40 lookups of 10 names for project A: more than libuv's four threads, and than A's share.
      const hanging = Array.from({ length: 40 }, (_, i) => r.resolve(`hang-many-${i % 10}.example.test`, 'prj_A').catch((e: unknown) => e));
      await until('A asking', async () => dns.count('hang-many-') > 0);
      // getaddrinfo (what IMAP, SMTP, PostgreSQL and Redis use) answers at once meanwhile.
      let started = performance.now();
      for (let i = 0; i < 8; i++) await lookup('localhost');
      expect(performance.now() - started, 'dns.lookup while A waits').to.be.below(500);
      // Project B is not queued behind A's share.
      started = performance.now();
      expect(await r.resolve('b-hooks.example.test', 'prj_B')).to.deep.equal([{ address: '93.184.215.14', family: 4 }]);
      expect(performance.now() - started, "B's lookup while A waits").to.be.below(500);
      // A's share: at most 4 names (A and AAAA each) asked at a time.
      expect(dns.count('hang-many-')).to.be.at.most(8);
      const failed = await Promise.all(hanging);
      for (const e of failed) expect(e).to.be.instanceOf(WebhookDnsError);
      // Each name asked once (A and AAAA), however many attempts wanted it.
      expect(dns.count('hang-many-')).to.equal(20);
    } finally {
      r.close();
    }
  });
});

describe('webhook projects do not hold each other back', function () {
  this.timeout(120_000);
  const { receiver, close: closeReceivers } = receiverPool();
  afterEach(closeReceivers);

  describe('endpoints on names whose server never answers', () => {
    let dns: FakeDns;
    let s: TestServer;
    before(async () => {
      dns = await new FakeDns().start();
      s = await startPostern({
        ...FAST,
        POSTERN_WEBHOOK_TIMEOUT_MS: '3000',
        POSTERN_WEBHOOK_LEASE_MS: '6000',
        POSTERN_WEBHOOK_DNS_SERVERS: `127.0.0.1:${dns.port}`,
        POSTERN_WEBHOOK_DNS_TIMEOUT_MS: '1000',
        POSTERN_WEBHOOK_DNS_TRIES: '1',
        // A's 300 attempts within the wait below, not at its failing endpoints' budget (20/s; that
        // bound has its own tests): this test is of the lookups.
        POSTERN_WEBHOOK_FAILING_PER_SECOND: '0',
        // localhost may be ::1 as well in /etc/hosts.
        POSTERN_WEBHOOK_ALLOW: '127.0.0.1/32,::1/128',
      });
    });
    after(async () => {
      await s?.close();
      dns?.close();
    });

    it("keep /readyz at 200 and another project's deliveries prompt; each name is asked a bounded number of times", async () => {
      const A = await project(s);
      const names = 20;
      for (let i = 0; i < names; i++) {
        const res = await A.a.send('POST', '/webhooks', { url: `https://hang-${i}.example.test/hook`, types: ['ext.*'] });
        expect(res.status, await res.clone().text()).to.equal(201);
      }
      await A.a.ship(5);
      await until('the name server asked', async () => dns.count('hang-') > 0);

      const B = await project(s);
      const r = await receiver();
      // localhost: resolved from /etc/hosts by the same resolver, not queued behind A's names.
      const hookB = await B.a.hook(r, { url: r.url.replace('127.0.0.1', 'localhost'), types: ['ext.*'] });
      expect(hookB.url).to.match(/^http:\/\/localhost:/);
      for (let round = 0; round < 3; round++) {
        const ready = await fetch(`${s.url}/readyz`);
        expect(ready.status, await ready.text()).to.equal(200);
        const started = Date.now();
        const [id] = await B.a.ship(1);
        const got = await until(`B's event ${round}`, async () => r.received.find((x) => x.id === id), 10_000);
        expect(got.at - started, "B's delivery while A's lookups hang").to.be.below(1000);
      }
      // A's deliveries fail for DNS (and say nothing more), and are retried from the kept failure.
      const hooks = (await A.a.send('GET', '/webhooks').then((res) => res.json())) as { webhooks: Array<{ id: string }> };
      await until(
        "A's deliveries retried",
        async () => {
          const list = await A.a.deliveries(hooks.webhooks[0]!.id);
          return list.deliveries.length === 5 && list.deliveries.every((d) => d.attempts >= 3);
        },
        30_000,
      );
      const [d] = (await A.a.deliveries(hooks.webhooks[0]!.id)).deliveries;
      expect(d!.lastError).to.match(/^resolving hang-\d+\.example\.test failed: ETIMEOUT$/);
      // Every endpoint has had its first attempt (each name asked); on a loaded machine the last ones
      // come well after endpoint 0's third.
      await until('every name asked', async () => new Set(dns.queries.filter((q) => q.startsWith('hang-'))).size === names, 30_000);
      // A and AAAA per name, once per kept failure (60 s): 5 events × 3 attempts × 20 endpoints did not ask again.
      expect(dns.count('hang-')).to.be.within(names, 2 * names);
    });
  });

  describe('receivers that never answer, fed a flood of events', () => {
    let s: TestServer;
    before(async () => {
      s = await startPostern({
        ...FAST,
        // Room for 2 × 16 deliveries held per project (lib/webhooks/in-flight.ts projectRoom).
        POSTERN_WEBHOOK_PROJECT_CONCURRENCY: '16',
        // No attempt times out while A's deliveries are counted.
        POSTERN_WEBHOOK_TIMEOUT_MS: '8000',
        POSTERN_WEBHOOK_LEASE_MS: '16000',
      });
    });
    after(async () => {
      await s?.close();
    });

    it("make no more deliveries than the project can send: another project's keep their pace, and all arrive once answered", async () => {
      const A = await project(s);
      const endpoints = 10;
      const events = 40;
      const hanging: Receiver[] = [];
      const hooks: string[] = [];
      for (let i = 0; i < endpoints; i++) {
        const r = await receiver();
        r.answer = () => 'hang';
        hooks.push((await A.a.hook(r, { types: ['ext.*'] })).id);
        hanging.push(r);
      }
      const shipped = await A.a.ship(events);
      const underWay = () => hanging.reduce((n, r) => n + r.hangingCount, 0);
      await until("A's share under way", async () => underWay() >= 16, 20_000);

      // B, made after A's flood: its deliveries keep their pace.
      const B = await project(s);
      const fast = await receiver();
      await B.a.hook(fast, { types: ['ext.*'] });
      for (let round = 0; round < 3; round++) {
        const started = Date.now();
        const [id] = await B.a.ship(1);
        const got = await until(`B's event ${round}`, async () => fast.received.find((x) => x.id === id), 10_000);
        expect(got.at - started, "B's delivery while A's receivers hang").to.be.below(1000);
      }

      // A's rows: what its share holds (twice its 16 under way), and what steps made a batch ahead
      // while it still had room (at most a batch of 16 per endpoint), not a row per endpoint per
      // event (400).
      let rows = 0;
      for (const id of hooks) rows += (await A.a.deliveries(id, '?limit=100')).deliveries.length;
      expect(rows, "A's deliveries made while its receivers hang").to.be.at.most(2 * 16 + endpoints * 16);
      expect(rows).to.be.at.least(16);

      // Answered again: every event reaches every endpoint (the rest were waiting in the log).
      for (const r of hanging) r.answer = () => ({ status: 204 });
      await until(
        "A's every event delivered to every endpoint",
        async () => hanging.every((r) => shipped.every((id) => r.delivered.has(id))),
        60_000,
      );
      for (const r of hanging) expect(r.unverified).to.deep.equal([]);
    });
  });

  describe('slow receivers that answer 200', () => {
    let s: TestServer;
    before(async () => {
      // 64 per endpoint: with the process-wide cap alone (512), A's 10 endpoints could take it all.
      s = await startPostern({
        ...FAST,
        POSTERN_WEBHOOK_CONCURRENCY: '64',
        POSTERN_WEBHOOK_TIMEOUT_MS: '10000',
        POSTERN_WEBHOOK_LEASE_MS: '30000',
      });
    });
    after(async () => {
      await s?.close();
    });

    it("take only their project's share: another project's deliveries keep their pace", async () => {
      const delayMs = 4000;
      const A = await project(s);
      const slow: Receiver[] = [];
      for (let i = 0; i < 10; i++) {
        const r = await receiver();
        r.answer = () => ({ status: 200, delayMs });
        await A.a.hook(r, { types: ['ext.*'] });
        slow.push(r);
      }
      await A.a.ship(64);
      const underWay = () => slow.reduce((n, r) => n + r.hangingCount, 0);
      await until('A saturating its share', async () => underWay() >= 64, 20_000);
      // A's backlog (640 deliveries, more than the process-wide cap of 512) is ahead of B's events
      // in the log: its deliveries are made as its share has room (the rest wait in the log).
      const B = await project(s);
      const fast = await receiver();
      await B.a.hook(fast, { types: ['ext.*'] });
      for (let round = 0; round < 3; round++) {
        const started = Date.now();
        const [id] = await B.a.ship(1);
        const got = await until(`B's event ${round}`, async () => fast.received.find((x) => x.id === id), 20_000);
        expect(got.at - started, `B's delivery (A's receivers take ${delayMs} ms)`).to.be.below(delayMs / 4);
        // A is still saturated: the measurement was taken under its load.
        expect(underWay(), "A's attempts under way").to.be.at.least(32);
      }
      // A's share (POSTERN_WEBHOOK_PROJECT_CONCURRENCY, 64) is what it has under way.
      expect(underWay()).to.be.at.most(64);
    });
  });
});
