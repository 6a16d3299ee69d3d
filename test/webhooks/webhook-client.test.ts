// The webhook delivery client (adapters/webhooks/client.ts) against real local HTTP(S) servers:
// what it reads of an answer, that it follows no redirect and keeps its deadline, and every way
// an address into the private network is refused, by literal URL and by name, rebinding included.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { cidrList, ConfigError, loadConfig } from '../../lib/config.ts';
import {
  AddressVerdicts,
  parseRetryAfter,
  postWebhook,
  refusal,
  WebhookClientError,
  type ResolvedAddress,
  type Resolver,
  WebhookConnections,
  type WebhookPostOptions,
  type WebhookResponse,
} from '../../adapters/webhooks/client.ts';

type Handler = (req: http.IncomingMessage, res: http.ServerResponse) => void;

interface Receiver {
  url: string;
  port: number;
  requests: Array<{ host: string | undefined; body: string; localAddress: string | undefined }>;
  close(): Promise<void>;
}

async function listen(server: http.Server | https.Server, scheme: 'http' | 'https', handler: Handler): Promise<Receiver> {
  const requests: Receiver['requests'] = [];
  server.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      requests.push({ host: req.headers.host, body: Buffer.concat(chunks).toString(), localAddress: req.socket.localAddress });
      handler(req, res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `${scheme}://127.0.0.1:${port}/hook`,
    port,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

const receiver = (handler: Handler): Promise<Receiver> => listen(http.createServer(), 'http', handler);

const loopback = loadConfig({ POSTERN_WEBHOOK_ALLOW: '127.0.0.1/32' }).webhookAllow;
const post = (url: string, extra: Partial<WebhookPostOptions> = {}): Promise<WebhookResponse> =>
  postWebhook(url, { headers: { 'webhook-id': 'evt_1' }, body: '{"type":"t"}', allow: loopback, timeoutMs: 5000, ...extra });

async function failure(promise: Promise<unknown>): Promise<WebhookClientError> {
  try {
    await promise;
  } catch (err) {
    if (err instanceof WebhookClientError) return err;
    throw err;
  }
  throw new Error('expected the delivery to fail');
}

/** A resolver that answers from a table, in turn per call, and counts its calls. */
function scripted(answers: Record<string, string[][]>): Resolver & { calls: string[] } {
  const calls: string[] = [];
  const resolve = async (hostname: string): Promise<ResolvedAddress[]> => {
    const turn = calls.filter((c) => c === hostname).length;
    calls.push(hostname);
    const list = answers[hostname];
    if (!list) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' });
    const round = list[Math.min(turn, list.length - 1)]!;
    return round.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
  };
  return Object.assign(resolve, { calls });
}

describe('webhooks: the delivery client', () => {
  const open: Receiver[] = [];
  const start = async (handler: Handler): Promise<Receiver> => {
    const r = await receiver(handler);
    open.push(r);
    return r;
  };
  afterEach(async () => {
    await Promise.all(open.splice(0).map((r) => r.close()));
  });

  it('POSTs the body and headers, and reads a big answer only to 4 KB, then hangs up', async () => {
    let written = 0;
    const total = 64 * 1024 * 1024;
    let serverClosed!: Promise<boolean>;
    const r = await start((_req, res) => {
      serverClosed = new Promise((resolve) => res.on('close', () => resolve(res.writableFinished)));
      res.writeHead(200, { 'content-type': 'text/plain' });
      const chunk = Buffer.alloc(16 * 1024, 'a');
      const pump = (): void => {
        while (written < total) {
          written += chunk.length;
          if (!res.write(chunk)) return void res.once('drain', pump);
        }
        res.end();
      };
      pump();
    });
    const answer = await post(r.url, { headers: { 'webhook-id': 'evt_9', 'webhook-signature': 'v1,x' } });
    expect(answer.status).to.equal(200);
    expect(answer.bodySnippet).to.equal('a'.repeat(4096));
    expect(answer.retryAfterSeconds).to.equal(null);
    expect(answer.ms).to.be.a('number').and.at.least(0);
    expect(r.requests).to.have.length(1);
    expect(r.requests[0]!.body).to.equal('{"type":"t"}');
    // The server's answer never finished: the client hung up long before 64 MB.
    expect(await serverClosed, 'the server finished sending').to.equal(false);
    expect(written).to.be.below(total);
  });

  it('sends the signed headers and the content type as given', async () => {
    let seen: http.IncomingHttpHeaders = {};
    const r = await start((req, res) => {
      seen = req.headers;
      res.end('ok');
    });
    const answer = await post(r.url, { headers: { 'webhook-id': 'evt_2', 'webhook-timestamp': '1', 'webhook-signature': 'v1,abc' } });
    expect(answer).to.include({ status: 200, bodySnippet: 'ok' });
    expect(seen).to.include({
      'webhook-id': 'evt_2',
      'webhook-timestamp': '1',
      'webhook-signature': 'v1,abc',
      'content-type': 'application/json',
      'content-length': '12',
    });
    await post(r.url, { headers: { 'Content-Type': 'application/json; charset=utf-8', 'Content-Length': '1' } });
    expect(seen).to.include({ 'content-type': 'application/json; charset=utf-8', 'content-length': '12' });
  });

  it('does not follow a redirect: a 302 is just its status', async () => {
    const target = await start((_req, res) => res.end('followed'));
    const r = await start((_req, res) => {
      res.writeHead(302, { location: target.url });
      res.end();
    });
    const answer = await post(r.url);
    expect(answer.status).to.equal(302);
    expect(target.requests, 'the redirect target was called').to.have.length(0);
  });

  it('times out a server that never answers, and one that stalls in its body', async () => {
    const silent = await start(() => {
      // never answers
    });
    const started = Date.now();
    const err = await failure(post(silent.url, { timeoutMs: 300 }));
    expect(err.reason).to.equal('timeout');
    expect(Date.now() - started).to.be.within(280, 3000);

    const stalls = await start((_req, res) => {
      res.writeHead(200);
      res.write('partial');
    });
    expect((await failure(post(stalls.url, { timeoutMs: 300 }))).reason).to.equal('timeout');
  });

  it('reads Retry-After on 429 and 503, as seconds or as an HTTP date', async () => {
    const r = await start((req, res) => {
      if (req.url === '/seconds') res.writeHead(429, { 'retry-after': '120' });
      else res.writeHead(503, { 'retry-after': new Date(Date.now() + 90_000).toUTCString() });
      res.end('slow down');
    });
    const base = `http://127.0.0.1:${r.port}`;
    const a = await post(`${base}/seconds`);
    expect(a).to.include({ status: 429, retryAfterSeconds: 120, bodySnippet: 'slow down' });
    const b = await post(`${base}/date`);
    expect(b.status).to.equal(503);
    expect(b.retryAfterSeconds).to.be.within(85, 91);

    expect(parseRetryAfter(' 7 ')).to.equal(7);
    expect(parseRetryAfter('Wed, 21 Oct 2015 07:28:00 GMT', Date.parse('2015-10-21T07:27:00Z'))).to.equal(60);
    expect(parseRetryAfter('Wed, 21 Oct 2015 07:28:00 GMT', Date.parse('2015-10-21T08:00:00Z'))).to.equal(0);
    expect(parseRetryAfter('soon')).to.equal(null);
    expect(parseRetryAfter('-5')).to.equal(null);
    expect(parseRetryAfter(undefined)).to.equal(null);
  });

  it('says why a connection failed: refused, TLS, DNS, a bad URL', async () => {
    const gone = await receiver((_req, res) => res.end());
    const port = gone.port;
    await gone.close();
    const refused = await failure(post(`http://127.0.0.1:${port}/`));
    expect(refused).to.include({ reason: 'connection', address: '127.0.0.1' });
    expect(refused.message).to.match(/ECONNREFUSED/);
    // By name: the URL's host, not the address it resolved to.
    const named = await failure(
      post(`http://hooks.example.test:${port}/`, { resolve: scripted({ 'hooks.example.test': [['127.0.0.1']] }) }),
    );
    expect(named).to.include({
      reason: 'connection',
      address: '127.0.0.1',
      message: 'connecting to hooks.example.test failed: ECONNREFUSED',
    });

    const dir = mkdtempSync(join(tmpdir(), 'postern-webhook-tls-'));
    try {
      execFileSync(
        'openssl',
        [
          'req',
          '-x509',
          '-newkey',
          'ec',
          '-pkeyopt',
          'ec_paramgen_curve:prime256v1',
          '-nodes',
          '-days',
          '1',
          '-subj',
          '/CN=hooks.example.test',
          '-keyout',
          join(dir, 'key.pem'),
          '-out',
          join(dir, 'cert.pem'),
        ],
        { stdio: 'ignore' },
      );
      const tls = await listen(
        https.createServer({ key: readFileSync(join(dir, 'key.pem')), cert: readFileSync(join(dir, 'cert.pem')) }),
        'https',
        (_req, res) => res.end('ok'),
      );
      open.push(tls);
      const resolve = scripted({ 'hooks.example.test': [['127.0.0.1']] });
      const err = await failure(post(`https://hooks.example.test:${tls.port}/hook`, { resolve }));
      expect(err.reason).to.equal('tls');
      expect(tls.requests).to.have.length(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }

    const dns = await failure(post('http://nowhere.example.test/', { resolve: scripted({}) }));
    expect(dns.reason).to.equal('dns');
    expect(dns.message).to.match(/ENOTFOUND/);
    expect((await failure(post('http://empty.example.test/', { resolve: async () => [] }))).reason).to.equal('dns');

    for (const url of ['ftp://127.0.0.1/', 'file:///etc/passwd', 'not a url', 'http://user:secret@127.0.0.1/']) {
      expect((await failure(post(url))).reason, url).to.equal('invalid-url');
    }
  });

  describe('addresses it will not call', () => {
    // Each of these, given as a URL, must be refused before any connection. The loopback ones
    // point at a live receiver's port, so a missing check would show as a delivered request.
    const literal = [
      'http://127.0.0.1:PORT/',
      'http://127.1.2.3:PORT/',
      'http://2130706433:PORT/',
      'http://0x7f.1:PORT/',
      'http://0x7f000001:PORT/',
      'http://017700000001:PORT/',
      'http://0177.0.0.1:PORT/',
      'http://127.0.0.1.:PORT/',
      'http://[::1]:PORT/',
      'http://[0:0:0:0:0:0:0:1]:PORT/',
      'http://[::ffff:127.0.0.1]:PORT/',
      'http://[::ffff:7f00:1]:PORT/',
      'http://[::127.0.0.1]:PORT/',
      'http://[64:ff9b::7f00:1]:PORT/',
      'http://[64:ff9b::10.0.0.1]/',
      'http://[2002:7f00:1::]:PORT/',
      'http://[2002:c0a8:101::1]/',
      'http://[2002:a9fe:a9fe::]/',
      'http://0.0.0.0:PORT/',
      'http://0/',
      'http://[::]:PORT/',
      'http://10.0.0.1/',
      'http://10.255.255.255/',
      'http://172.16.0.1/',
      'http://172.31.255.254/',
      'http://192.168.1.1/',
      'http://100.64.0.1/',
      'http://100.127.255.254/',
      'http://169.254.169.254/latest/meta-data/',
      'http://169.254.0.1/',
      'http://[fe80::1]/',
      'http://[febf::1]/',
      'http://[fc00::1]/',
      'http://[fd12:3456::1]/',
      'http://224.0.0.1/',
      'http://239.255.255.250/',
      'http://[ff02::1]/',
      'http://255.255.255.255/',
      'http://192.0.0.8/',
      'http://192.0.2.1/',
      'http://198.18.0.1/',
      'http://198.19.255.254/',
      'http://198.51.100.7/',
      'http://203.0.113.9/',
      'http://240.0.0.1/',
      'http://[2001:db8::1]/',
    ];

    it('refuses every private, local and reserved form given literally in the URL', async () => {
      const live = await start((_req, res) => res.end('reached'));
      for (const template of literal) {
        const url = template.replace('PORT', String(live.port));
        // No allowances at all here: the default.
        const err = await failure(post(url, { allow: [], timeoutMs: 2000 }));
        expect(err.reason, url).to.equal('refused-address');
        expect(err.address, url).to.be.a('string');
      }
      expect(live.requests, 'a refused URL reached the receiver').to.have.length(0);
      // The same receiver is reachable when allowed: the refusals above were the check, not the network.
      expect((await post(live.url)).status).to.equal(200);
    });

    it('refuses a name that resolves to any such address, even one among public ones', async () => {
      const forbidden = [
        '127.0.0.1',
        '::1',
        '10.1.1.1',
        '172.20.0.5',
        '192.168.0.10',
        '100.100.100.100',
        '169.254.169.254',
        'fe80::abcd',
        'fd00::5',
        '224.1.1.1',
        'ff05::2',
        '0.0.0.0',
        '::',
        '255.255.255.255',
        '192.0.2.33',
        '198.18.5.5',
        '198.51.100.1',
        '203.0.113.1',
        '240.1.2.3',
        '::ffff:127.0.0.1',
        '::ffff:7f00:1',
        '::ffff:10.0.0.1',
        '64:ff9b::a9fe:a9fe',
        '2002:0a00:0001::1',
      ];
      for (const address of forbidden) {
        const resolve = scripted({ 'hooks.example.test': [['93.184.215.14', address]] });
        const err = await failure(post('http://hooks.example.test/', { resolve, allow: [] }));
        expect(err.reason, address).to.equal('refused-address');
        expect(err.address, address).to.equal(address);
        // The message goes to the endpoint's owner: neither the address nor its kind.
        expect(err.message, address).to.equal('hooks.example.test resolves to an address Postern does not call (docs/webhooks.md)');
        expect(resolve.calls).to.deep.equal(['hooks.example.test']);
      }
    });

    it('refuses a trailing-dot name and localhost by what they resolve to', async () => {
      const live = await start((_req, res) => res.end('reached'));
      const resolve = scripted({ 'localhost.': [['127.0.0.1']], 'hooks.example.test.': [['10.0.0.7']] });
      for (const url of [`http://localhost.:${live.port}/`, 'http://HOOKS.example.test./']) {
        const err = await failure(post(url, { resolve, allow: [] }));
        expect(err.reason, url).to.equal('refused-address');
      }
      expect(resolve.calls).to.deep.equal(['localhost.', 'hooks.example.test.']);
      // The system resolver too: localhost is loopback whatever form it takes.
      expect((await failure(post(`http://localhost:${live.port}/`, { allow: [] }))).reason).to.equal('refused-address');
      expect(live.requests).to.have.length(0);
    });

    it('calls public addresses, including IPv6 forms that embed a public IPv4 one', () => {
      for (const address of [
        '93.184.215.14',
        '8.8.8.8',
        '1.1.1.1',
        '2606:4700:4700::1111',
        '2a00:1450:4001::200e',
        '::ffff:8.8.8.8',
        '64:ff9b::808:808',
        '2002:808:808::1',
        '100.63.255.255',
        '100.128.0.1',
        '172.15.255.255',
        '172.32.0.1',
        '198.17.255.255',
        '198.20.0.1',
        '223.255.255.255',
      ]) {
        expect(refusal(address), address).to.equal(null);
      }
      expect(refusal('::ffff:127.0.0.1')).to.match(/loopback/);
      expect(refusal('64:ff9b::a00:1')).to.match(/private \(10\.0\.0\.1 inside/);
      expect(refusal('2002:c0a8:0101::')).to.match(/private \(192\.168\.1\.1 inside/);
      expect(refusal('169.254.169.254')).to.match(/metadata/);
      expect(refusal('::ffff:0:127.0.0.1')).to.match(/loopback/);
      expect(refusal('0:0:0:0:0:ffff:7f00:1')).to.match(/loopback/);
      expect(refusal('2606:4700::1%eth0')).to.match(/local interface/);
      expect(refusal('fe80::1%2')).to.match(/local interface/);
    });

    it('calls what POSTERN_WEBHOOK_ALLOW lists, and only that', () => {
      const allow = loadConfig({ POSTERN_WEBHOOK_ALLOW: '10.1.2.0/24, fd00::/8,127.0.0.1' }).webhookAllow;
      expect(allow).to.deep.equal([
        { network: '10.1.2.0', prefix: 24, family: 'ipv4' },
        { network: 'fd00::', prefix: 8, family: 'ipv6' },
        { network: '127.0.0.1', prefix: 32, family: 'ipv4' },
      ]);
      expect(refusal('10.1.2.200', allow)).to.equal(null);
      expect(refusal('10.1.3.1', allow)).to.match(/private/);
      expect(refusal('fd12::1', allow)).to.equal(null);
      expect(refusal('127.0.0.1', allow)).to.equal(null);
      expect(refusal('127.0.0.2', allow)).to.match(/loopback/);
      expect(loadConfig({}).webhookAllow).to.deep.equal([]);
      for (const bad of ['10.0.0.0/33', 'fd00::/129', 'example.org', '10.0.0/8', '10.0.0.0/', '10.0.0.0/8,']) {
        expect(() => cidrList('POSTERN_WEBHOOK_ALLOW', bad), bad).to.throw(ConfigError, /POSTERN_WEBHOOK_ALLOW/);
      }
    });
  });

  describe('DNS rebinding: one resolution, and the connection goes to the address checked', () => {
    it('resolves once and connects to the first answer, though the name now points inside', async () => {
      const live = await start((_req, res) => res.end('pinned'));
      // First 127.0.0.1 (allowed in this test), then 10.0.0.1: a second lookup would land there.
      const resolve = scripted({ 'rebind.example.test': [['127.0.0.1'], ['10.0.0.1']] });
      const answer = await post(`http://rebind.example.test:${live.port}/hook`, { resolve });
      expect(answer).to.include({ status: 200, bodySnippet: 'pinned' });
      expect(resolve.calls).to.deep.equal(['rebind.example.test']);
      expect(live.requests).to.have.length(1);
      // It reached the checked address, and told the receiver the name it asked for.
      expect(live.requests[0]!.localAddress).to.equal('127.0.0.1');
      expect(live.requests[0]!.host).to.equal(`rebind.example.test:${live.port}`);
    });

    it('connects to a checked IPv6 address as well', async () => {
      const server = http.createServer();
      const requests: Array<string | undefined> = [];
      server.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
        requests.push(req.socket.localAddress);
        res.end('v6');
      });
      await new Promise<void>((resolve) => server.listen(0, '::1', resolve));
      const { port } = server.address() as AddressInfo;
      try {
        const resolve = scripted({ 'six.example.test': [['::1'], ['127.0.0.1']] });
        const allow = loadConfig({ POSTERN_WEBHOOK_ALLOW: '::1/128' }).webhookAllow;
        expect(await post(`http://six.example.test:${port}/`, { resolve, allow })).to.include({ status: 200, bodySnippet: 'v6' });
        expect((await post(`http://[::1]:${port}/`, { allow })).status).to.equal(200);
        expect(requests).to.deep.equal(['::1', '::1']);
        expect(resolve.calls).to.have.length(1);
        // Without the allowance the same name is refused.
        expect(
          (await failure(post(`http://six.example.test:${port}/`, { resolve: scripted({ 'six.example.test': [['::1']] }), allow: [] })))
            .reason,
        ).to.equal('refused-address');
      } finally {
        server.closeAllConnections();
        await new Promise<void>((resolve) => server.close(() => resolve()));
      }
    });

    it('with pooled connections, reuses one only for the address checked this time, and re-resolves every attempt', async () => {
      const server = http.createServer((req, res) => {
        req.resume();
        req.on('end', () => res.end(req.socket.localAddress));
      });
      let connections = 0;
      server.on('connection', () => connections++);
      await new Promise<void>((resolve) => server.listen(0, '::', resolve));
      const { port } = server.address() as AddressInfo;
      const pool = new WebhookConnections();
      try {
        const allow = loadConfig({ POSTERN_WEBHOOK_ALLOW: '127.0.0.1/32,::1/128' }).webhookAllow;
        // The same name answers 127.0.0.1 twice, then ::1, then 10.0.0.1.
        const resolve = scripted({ 'pool.example.test': [['127.0.0.1'], ['127.0.0.1'], ['::1'], ['10.0.0.1']] });
        const url = `http://pool.example.test:${port}/hook`;
        expect((await post(url, { resolve, allow, connections: pool })).bodySnippet).to.match(/127\.0\.0\.1$/);
        // undici hands a connection back to its pool on the turn after the answer is read.
        await new Promise((resolve) => setImmediate(resolve));
        expect((await post(url, { resolve, allow, connections: pool })).bodySnippet).to.match(/127\.0\.0\.1$/);
        expect(connections, 'the second attempt reused the first connection').to.equal(1);
        // Rebound: a new connection, to the new checked address.
        expect((await post(url, { resolve, allow, connections: pool })).bodySnippet).to.equal('::1');
        expect(connections).to.equal(2);
        // Rebound into a refused network: refused, though a pooled connection to the name exists.
        expect((await failure(post(url, { resolve, allow, connections: pool }))).reason).to.equal('refused-address');
        expect(resolve.calls).to.have.length(4);
        expect(connections).to.equal(2);
      } finally {
        pool.close();
        server.closeAllConnections();
        await new Promise<void>((resolve) => server.close(() => resolve()));
      }
    });

    it('with verdicts kept, resolves a name once per TTL and per allow list, and sees a change after it', async () => {
      const live = await start((_req, res) => res.end('ok'));
      let clock = 0;
      const verdicts = new AddressVerdicts(1000, () => clock);
      const resolve = scripted({ 'kept.example.test': [['127.0.0.1'], ['10.0.0.1']] });
      const url = `http://kept.example.test:${live.port}/`;
      expect((await post(url, { resolve, verdicts })).status).to.equal(200);
      expect((await post(url, { resolve, verdicts })).status).to.equal(200);
      expect(resolve.calls, 'the second attempt used the kept verdict').to.have.length(1);
      // Another allow list has verdicts of its own: under none, the name is refused.
      expect(
        (await failure(post(url, { resolve: scripted({ 'kept.example.test': [['127.0.0.1']] }), verdicts, allow: [] }))).reason,
      ).to.equal('refused-address');
      clock = 1000;
      // Past the TTL the name is resolved again, and its new address checked and refused.
      expect((await failure(post(url, { resolve, verdicts }))).reason).to.equal('refused-address');
      expect(resolve.calls).to.have.length(2);
      expect(live.requests).to.have.length(2);
    });

    it('given a public address first and a private one after, it never goes to the private one', async () => {
      const live = await start((_req, res) => res.end('should not be reached'));
      const resolve = scripted({ 'rebind.example.test': [['192.88.98.1'], ['127.0.0.1']] });
      // The public address is unreachable here: the attempt fails, by timeout or by the network.
      const err = await failure(post(`http://rebind.example.test:${live.port}/`, { resolve, timeoutMs: 1000 }));
      expect(err.reason).to.be.oneOf(['timeout', 'connection']);
      expect(resolve.calls).to.deep.equal(['rebind.example.test']);
      expect(live.requests, 'the connection went to the second answer').to.have.length(0);
    });
  });
});
