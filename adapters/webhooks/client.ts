// The one way Postern calls a webhook receiver: a POST that cannot be pointed into the private
// network (SSRF). The host is resolved here, once; every address it resolves to must be a public
// one (or listed in POSTERN_WEBHOOK_ALLOW), and the connection goes to exactly the address that
// was checked, so a name that answers differently the second time (DNS rebinding) gains nothing.
// No redirect is followed, the whole attempt has one deadline, and at most 4 KB of the answer is
// read. Failures are a WebhookClientError saying why; the dispatcher maps them to its retries.
import { promises as dns } from 'node:dns';
import http from 'node:http';
import https from 'node:https';
import { BlockList, isIP, type LookupFunction } from 'node:net';
import type { Cidr } from '../../lib/config.ts';
import type { Poster } from '../../lib/webhooks/dispatcher.ts';

export type WebhookClientFailure =
  /** Not an http(s) URL with a host, or one carrying a user name or password. */
  | 'invalid-url'
  /** The host is, or resolves to, an address Postern does not call (`address` says which). */
  | 'refused-address'
  | 'dns'
  | 'timeout'
  | 'connection'
  | 'tls'
  /** The caller gave up (its `signal`): the service is stopping. Says nothing of the receiver. */
  | 'cancelled';

/** Adapter-level: not a DomainError (a failed delivery is the receiver's state, not a request's). */
export class WebhookClientError extends Error {
  constructor(
    readonly reason: WebhookClientFailure,
    message: string,
    /** The refused address, or the one the connection went to. */
    readonly address?: string,
  ) {
    super(message);
    this.name = 'WebhookClientError';
  }
}

export interface ResolvedAddress {
  address: string;
  family: number;
}
/** dns.promises.lookup(name, {all: true}) by default; tests inject their own. */
export type Resolver = (hostname: string) => Promise<ResolvedAddress[]>;

export interface WebhookPostOptions {
  headers: Readonly<Record<string, string>>;
  body: string;
  /** Networks called even though they are not public (POSTERN_WEBHOOK_ALLOW). */
  allow?: readonly Cidr[];
  resolve?: Resolver;
  /** The whole attempt: resolving, connecting, sending, the status and the body read. */
  timeoutMs?: number;
  maxBodyBytes?: number;
  /** Abandons the attempt (a 'cancelled' failure). */
  signal?: AbortSignal;
  /** Keep-alive connections per checked address; without it each attempt opens its own. */
  connections?: WebhookConnections;
}

/**
 * Keep-alive connections, pooled per scheme, host and *checked address*: a pooled socket is
 * connected to an address that passed the check, and an attempt only ever takes one from the
 * pool of the address it checked this time. So reuse cannot carry a request anywhere a fresh
 * connection could not go (a name rebound to another address gets another pool).
 */
export class WebhookConnections {
  private readonly agents = new Map<string, http.Agent>();

  constructor(private readonly maxPools = 1024) {}

  agentFor(isHttps: boolean, host: string, address: string): http.Agent {
    const key = `${isHttps ? 'https' : 'http'} ${host} ${address}`;
    let agent = this.agents.get(key);
    if (agent) {
      // Most recently used last: the first is the one to drop when there are too many.
      this.agents.delete(key);
      this.agents.set(key, agent);
      return agent;
    }
    if (this.agents.size >= this.maxPools) {
      const [oldest, pool] = this.agents.entries().next().value as [string, http.Agent];
      pool.destroy();
      this.agents.delete(oldest);
    }
    // Idle sockets close after 30 s; the agent unrefs them, so they never hold the process up.
    const options = { keepAlive: true, maxSockets: 64, maxFreeSockets: 16, timeout: 30_000 };
    agent = isHttps ? new https.Agent(options) : new http.Agent(options);
    this.agents.set(key, agent);
    return agent;
  }

  close(): void {
    for (const agent of this.agents.values()) agent.destroy();
    this.agents.clear();
  }
}

export interface WebhookResponse {
  status: number;
  /** From Retry-After (seconds, or an HTTP date turned into seconds from now); null if absent or unreadable. */
  retryAfterSeconds: number | null;
  /** The first bytes of the answer (at most maxBodyBytes), as text. */
  bodySnippet: string;
  ms: number;
}

export const DEFAULT_TIMEOUT_MS = 15_000;
export const DEFAULT_MAX_BODY_BYTES = 4096;

// Not globally reachable (IANA's special-purpose registries), or the cloud metadata address.
const REFUSED_V4: ReadonlyArray<[string, number, string]> = [
  ['0.0.0.0', 8, 'this network / unspecified'],
  ['10.0.0.0', 8, 'private'],
  ['100.64.0.0', 10, 'carrier-grade NAT'],
  ['127.0.0.0', 8, 'loopback'],
  ['169.254.0.0', 16, 'link-local (and cloud metadata)'],
  ['172.16.0.0', 12, 'private'],
  ['192.0.0.0', 24, 'IETF protocol assignments'],
  ['192.0.2.0', 24, 'documentation'],
  ['192.88.99.0', 24, '6to4 relay anycast'],
  ['192.168.0.0', 16, 'private'],
  ['198.18.0.0', 15, 'benchmarking'],
  ['198.51.100.0', 24, 'documentation'],
  ['203.0.113.0', 24, 'documentation'],
  ['224.0.0.0', 4, 'multicast'],
  ['240.0.0.0', 4, 'reserved and broadcast'],
];
const REFUSED_V6: ReadonlyArray<[string, number, string]> = [
  ['::', 128, 'unspecified'],
  ['::1', 128, 'loopback'],
  ['100::', 64, 'discard'],
  ['2001::', 32, 'Teredo'],
  ['2001:2::', 48, 'benchmarking'],
  ['2001:10::', 28, 'ORCHID'],
  ['2001:20::', 28, 'ORCHIDv2'],
  ['2001:db8::', 32, 'documentation'],
  ['3fff::', 20, 'documentation'],
  ['64:ff9b:1::', 48, 'local-use NAT64'],
  ['fc00::', 7, 'unique local'],
  ['fe80::', 10, 'link-local'],
  ['fec0::', 10, 'site-local'],
  ['ff00::', 8, 'multicast'],
];

function blockList(entries: ReadonlyArray<[string, number, string]>, family: 'ipv4' | 'ipv6'): Array<[BlockList, string]> {
  return entries.map(([network, prefix, why]) => {
    const list = new BlockList();
    list.addSubnet(network, prefix, family);
    return [list, why];
  });
}
const REFUSED_V4_LISTS = blockList(REFUSED_V4, 'ipv4');
const REFUSED_V6_LISTS = blockList(REFUSED_V6, 'ipv6');

/** The 16 bytes of an IPv6 address (any textual form Node accepts). */
function v6Bytes(address: string): Buffer {
  // Expand "::" and a dotted IPv4 tail, then read eight groups.
  let text = address.toLowerCase();
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (dotted) {
    const b = dotted[1]!.split('.').map(Number);
    text = text.slice(0, -dotted[1]!.length) + `${((b[0]! << 8) | b[1]!).toString(16)}:${((b[2]! << 8) | b[3]!).toString(16)}`;
  }
  const [head, tail] = text.includes('::') ? text.split('::') : [text, undefined];
  const headGroups = head ? head.split(':') : [];
  const tailGroups = tail ? tail.split(':') : [];
  const groups = tail === undefined ? headGroups : [...headGroups, ...Array(8 - headGroups.length - tailGroups.length).fill('0'), ...tailGroups];
  const out = Buffer.alloc(16);
  groups.forEach((g, i) => out.writeUInt16BE(parseInt(g, 16), i * 2));
  return out;
}

const v4Text = (b: Buffer, at: number): string => `${b[at]}.${b[at + 1]}.${b[at + 2]}.${b[at + 3]}`;

/** The IPv4 address an IPv6 one carries (mapped, compatible, NAT64, 6to4), which is what it reaches. */
function embeddedV4(address: string): string | null {
  const b = v6Bytes(address);
  const zero = (from: number, to: number): boolean => b.subarray(from, to).every((x) => x === 0);
  if (zero(0, 10) && b[10] === 0xff && b[11] === 0xff) return v4Text(b, 12); // ::ffff:a.b.c.d
  if (zero(0, 8) && b[8] === 0xff && b[9] === 0xff && zero(10, 12)) return v4Text(b, 12); // ::ffff:0:a.b.c.d (SIIT)
  if (zero(0, 12) && !zero(12, 16)) return v4Text(b, 12); // ::a.b.c.d (deprecated "compatible")
  if (b.readUInt32BE(0) === 0x0064ff9b && zero(4, 12)) return v4Text(b, 12); // 64:ff9b::/96
  if (b.readUInt16BE(0) === 0x2002) return v4Text(b, 2); // 2002:AABB:CCDD::/48
  return null;
}

/** Why Postern will not call this address, or null when it will. */
export function refusal(address: string, allow: readonly Cidr[] = []): string | null {
  const family = isIP(address);
  if (family === 0) return 'not an IP address';
  // A zone (fe80::1%eth0) names a local link; no public address needs one.
  if (address.includes('%')) return 'scoped to a local interface';
  const allowed = new BlockList();
  for (const c of allow) allowed.addSubnet(c.network, c.prefix, c.family);
  if (allowed.check(address, family === 4 ? 'ipv4' : 'ipv6')) return null;
  if (family === 4) {
    for (const [list, why] of REFUSED_V4_LISTS) if (list.check(address, 'ipv4')) return why;
    return null;
  }
  for (const [list, why] of REFUSED_V6_LISTS) if (list.check(address, 'ipv6')) return why;
  const inner = embeddedV4(address);
  if (inner !== null) {
    const why = refusal(inner, allow);
    if (why !== null) return `${why} (${inner} inside ${address})`;
  }
  return null;
}

const systemResolver: Resolver = (hostname) => dns.lookup(hostname, { all: true, verbatim: true });

/** Retry-After as seconds from now: a number of seconds, or an HTTP date. */
export function parseRetryAfter(value: string | undefined, now: number = Date.now()): number | null {
  if (value === undefined) return null;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text);
  // An HTTP date starts with the day's name; Date.parse alone would read "-5" as a year.
  if (!/^[A-Za-z]{3}/.test(text)) return null;
  const at = Date.parse(text);
  if (Number.isNaN(at)) return null;
  return Math.max(0, Math.ceil((at - now) / 1000));
}

const TLS_CODE = /CERT|TLS|SSL|HOSTNAME|SIGNATURE|ALTNAME/;

function describe(err: NodeJS.ErrnoException, isHttps: boolean, address: string): WebhookClientError {
  const code = err.code ?? '';
  if (isHttps && (TLS_CODE.test(code) || /ssl|tls|certificate/i.test(err.message))) {
    return new WebhookClientError('tls', `TLS with ${address} failed: ${code || err.message}`, address);
  }
  return new WebhookClientError('connection', `connecting to ${address} failed: ${code || err.message}`, address);
}

/**
 * POST `body` to `url`, having checked where it goes. Resolves with the receiver's answer (any
 * status, a 3xx included: redirects are not followed); rejects with a WebhookClientError.
 */
export async function postWebhook(url: string, options: WebhookPostOptions): Promise<WebhookResponse> {
  const started = performance.now();
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const maxBodyBytes = options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
  const allow = options.allow ?? [];

  let target: URL;
  try {
    target = new URL(url);
  } catch {
    throw new WebhookClientError('invalid-url', 'the webhook URL does not parse');
  }
  if ((target.protocol !== 'http:' && target.protocol !== 'https:') || target.hostname === '') {
    throw new WebhookClientError('invalid-url', 'a webhook URL is http:// or https:// with a host');
  }
  // Credentials in the URL would be sent to whoever answers; the secret signs instead.
  if (target.username !== '' || target.password !== '') {
    throw new WebhookClientError('invalid-url', 'a webhook URL carries no user name or password');
  }
  const isHttps = target.protocol === 'https:';
  // WHATWG URL has already turned 2130706433, 0x7f.1 and 017700000001 into 127.0.0.1.
  const host = target.hostname.replace(/^\[|\]$/g, '');

  const deadline = new AbortController();
  const timer = setTimeout(() => deadline.abort(), timeoutMs);
  const cancel = (): void => deadline.abort();
  options.signal?.addEventListener('abort', cancel, { once: true });
  const timedOut = (): WebhookClientError =>
    options.signal?.aborted ? new WebhookClientError('cancelled', 'the attempt was cancelled') : new WebhookClientError('timeout', `no answer within ${timeoutMs} ms`);
  try {
    let pinned: ResolvedAddress;
    if (isIP(host) !== 0) {
      pinned = { address: host, family: isIP(host) };
    } else {
      const resolving = (options.resolve ?? systemResolver)(host);
      let addresses: ResolvedAddress[];
      try {
        addresses = await Promise.race([
          resolving,
          new Promise<never>((_, reject) => deadline.signal.addEventListener('abort', () => reject(timedOut()), { once: true })),
        ]);
      } catch (err) {
        if (err instanceof WebhookClientError) throw err;
        const code = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
        throw new WebhookClientError('dns', `resolving ${host} failed: ${code}`);
      }
      if (addresses.length === 0) throw new WebhookClientError('dns', `${host} resolves to no address`);
      // Every address, not just the one used: a name must not be able to point inside at all.
      for (const a of addresses) {
        const why = refusal(a.address, allow);
        if (why !== null) throw new WebhookClientError('refused-address', `${host} resolves to ${a.address}: ${why}`, a.address);
      }
      pinned = addresses[0]!;
    }
    const why = refusal(pinned.address, allow);
    if (why !== null) throw new WebhookClientError('refused-address', `${pinned.address}: ${why}`, pinned.address);
    if (deadline.signal.aborted) throw timedOut();
    return await send(target, isHttps, pinned, options, maxBodyBytes, deadline.signal, timedOut, started);
  } finally {
    clearTimeout(timer);
    options.signal?.removeEventListener('abort', cancel);
  }
}

function send(
  target: URL,
  isHttps: boolean,
  pinned: ResolvedAddress,
  options: WebhookPostOptions,
  maxBodyBytes: number,
  signal: AbortSignal,
  timedOut: () => WebhookClientError,
  started: number,
): Promise<WebhookResponse> {
  // Node resolves through this instead of DNS: it can only ever answer the checked address.
  const lookup: LookupFunction = (_hostname, lookupOptions, callback) => {
    if (lookupOptions.all) callback(null, [{ address: pinned.address, family: pinned.family }]);
    else callback(null, pinned.address, pinned.family);
  };
  const body = Buffer.from(options.body);
  // Header names are case-insensitive: one of each, ours for the length.
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  for (const [name, value] of Object.entries(options.headers)) headers[name.toLowerCase()] = value;
  headers['content-length'] = String(body.length);
  return new Promise<WebhookResponse>((resolve, reject) => {
    let settled = false;
    const finish = (fn: () => void): void => {
      if (settled) return;
      settled = true;
      signal.removeEventListener('abort', onAbort);
      fn();
    };
    const request = (isHttps ? https : http).request(target, {
      method: 'POST',
      lookup,
      // Pooled only with connections to the very address checked for this attempt (WebhookConnections).
      agent: options.connections ? options.connections.agentFor(isHttps, target.host, pinned.address) : false,
      headers,
    });
    const onAbort = (): void => {
      finish(() => reject(timedOut()));
      request.destroy();
    };
    signal.addEventListener('abort', onAbort, { once: true });
    request.on('error', (err: NodeJS.ErrnoException) => finish(() => reject(describe(err, isHttps, pinned.address))));
    request.on('response', (response) => {
      const chunks: Buffer[] = [];
      let length = 0;
      const done = (cut: boolean): void => {
        finish(() =>
          resolve({
            status: response.statusCode ?? 0,
            retryAfterSeconds: parseRetryAfter(response.headers['retry-after']),
            bodySnippet: Buffer.concat(chunks).subarray(0, maxBodyBytes).toString('utf8'),
            ms: Math.round(performance.now() - started),
          }),
        );
        // An answer longer than we read is not read on: that socket goes. One read to its end may be reused.
        if (cut) {
          response.destroy();
          request.destroy();
        }
      };
      response.on('data', (chunk: Buffer) => {
        chunks.push(chunk);
        length += chunk.length;
        if (length >= maxBodyBytes) done(true);
      });
      response.on('end', () => done(false));
      // Cut short by the receiver: its status still stands, with what arrived.
      response.on('close', () => done(!response.complete));
      response.on('error', (err: NodeJS.ErrnoException) => finish(() => reject(describe(err, isHttps, pinned.address))));
    });
    request.end(body);
  });
}

/**
 * The dispatcher's way to reach receivers (lib/webhooks/dispatcher.ts Poster): postWebhook with
 * the service's settings, a refusal or a failure to connect being an answer, not a throw.
 */
export function webhookPoster(settings: { allow: readonly Cidr[]; timeoutMs: number; connections: WebhookConnections; resolve?: Resolver }): Poster {
  return async (url, headers, body, signal) => {
    const started = performance.now();
    try {
      const r = await postWebhook(url, {
        headers,
        body,
        allow: settings.allow,
        timeoutMs: settings.timeoutMs,
        connections: settings.connections,
        ...(settings.resolve ? { resolve: settings.resolve } : {}),
        ...(signal ? { signal } : {}),
      });
      return { ok: true, status: r.status, retryAfterSeconds: r.retryAfterSeconds, ms: Math.round(r.ms) };
    } catch (err) {
      if (!(err instanceof WebhookClientError)) throw err;
      return { ok: false, error: err.message, ms: Math.round(performance.now() - started), cancelled: err.reason === 'cancelled' };
    }
  };
}
