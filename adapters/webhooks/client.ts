// The one way Postern calls a webhook receiver: a POST that cannot be pointed into the private
// network (SSRF). The host is resolved here, once; every address it resolves to must be a public
// one (or listed in POSTERN_WEBHOOK_ALLOW), and the connection goes to exactly the address that
// was checked, so a name that answers differently the second time (DNS rebinding) gains nothing.
// No redirect is followed, the whole attempt has one deadline, and at most 4 KB of the answer is
// read. Failures are a WebhookClientError saying why; the dispatcher maps them to its retries.
// Its message goes to the endpoint's owner (a delivery's lastError, a test send's error), so it
// never says what a name resolved to: the check would otherwise map the internal DNS for anyone.
import { BlockList, isIP } from 'node:net';
import { buildConnector, Pool, type Dispatcher } from 'undici';
import type { Cidr } from '../../lib/config.ts';
import type { Poster } from '../../lib/webhooks/ports.ts';
import { remembered } from '../../lib/remembered.ts';
import { WebhookDns } from './dns.ts';

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
/**
 * A host's addresses, looked up for a project's attempt (its share of lookups): WebhookDns
 * (./dns.ts) in the service, never dns.lookup (libuv's thread pool); tests inject their own.
 */
export type Resolver = (hostname: string, project: string) => Promise<ResolvedAddress[]>;

export interface WebhookPostOptions {
  headers: Readonly<Record<string, string>>;
  body: string;
  /** Networks called even though they are not public (POSTERN_WEBHOOK_ALLOW). */
  allow?: readonly Cidr[];
  resolve?: Resolver;
  /** Whose attempt it is (the resolver's per-project share of lookups). */
  project?: string;
  /** The whole attempt: resolving, connecting, sending, the status and the body read. */
  timeoutMs?: number;
  maxBodyBytes?: number;
  /** Abandons the attempt (a 'cancelled' failure). */
  signal?: AbortSignal;
  /** Keep-alive connections per checked address; without it each attempt opens its own. */
  connections?: WebhookConnections;
  /** Verdicts on names, kept a short while; without it every attempt resolves its host. */
  verdicts?: AddressVerdicts;
}

/** A webhook URL, parsed and checked for its form (not yet its address). */
interface Target {
  url: URL;
  isHttps: boolean;
  /** The host without IPv6 brackets. */
  host: string;
  /** Path and query, as sent. */
  path: string;
  /** url.origin, read once (the getter builds it anew each time). */
  origin: string;
}

/**
 * Keep-alive connections, pooled per scheme, host and *checked address*: a pooled socket is
 * connected to an address that passed the check, and an attempt only ever takes one from the
 * pool of the address it checked this time. So reuse cannot carry a request anywhere a fresh
 * connection could not go (a name rebound to another address gets another pool).
 */
export class WebhookConnections {
  private readonly pools = new Map<string, Pool>();
  /** The pool used last, already last in `pools`. */
  private last: string | null = null;

  constructor(private readonly maxPools = 1024) {}

  poolFor(target: Target, address: string): Pool {
    const key = `${target.origin} ${address}`;
    let pool = this.pools.get(key);
    if (pool) {
      if (this.last === key) return pool;
      this.last = key;
      // Most recently used last: the first is the one to drop when there are too many.
      this.pools.delete(key);
      this.pools.set(key, pool);
      return pool;
    }
    if (this.pools.size >= this.maxPools) {
      const [oldest, idle] = this.pools.entries().next().value as [string, Pool];
      void idle.close().catch(() => undefined);
      this.pools.delete(oldest);
    }
    pool = connectTo(target, address, 64);
    this.pools.set(key, pool);
    this.last = key;
    return pool;
  }

  close(): void {
    for (const pool of this.pools.values()) void pool.destroy().catch(() => undefined);
    this.pools.clear();
    this.last = null;
  }
}

/**
 * A pool for the URL's origin whose every socket goes to `address`, whatever the name resolves
 * to by then: undici sends the URL's host as Host and as TLS SNI (and checks the certificate
 * against it), and connects where this says.
 */
function connectTo(target: Target, address: string, connections: number): Pool {
  const connect = buildConnector({});
  return new Pool(target.origin, {
    connections,
    // Idle sockets close after 30 s; undici unrefs idle ones, so they never hold the process up.
    keepAliveTimeout: 30_000,
    keepAliveMaxTimeout: 30_000,
    connect: (options, callback) => connect({ ...options, hostname: address }, callback),
  });
}

/**
 * What a name resolved to and whether it may be called, kept `ttlMs` per allow list (a short
 * while, so a change of DNS is seen soon). Connections still go only to the address the verdict
 * checked: reuse saves the lookup, not the check.
 */
export class AddressVerdicts {
  private readonly byAllow = new WeakMap<readonly Cidr[], Map<string, { at: number; pinned: ResolvedAddress }>>();

  constructor(
    readonly ttlMs = 5000,
    private readonly now: () => number = Date.now,
    private readonly max = 4096,
  ) {}

  get(allow: readonly Cidr[], host: string): ResolvedAddress | null {
    const known = this.byAllow.get(allow)?.get(host);
    return known && this.now() - known.at < this.ttlMs ? known.pinned : null;
  }

  set(allow: readonly Cidr[], host: string, pinned: ResolvedAddress): void {
    let map = this.byAllow.get(allow);
    if (!map) this.byAllow.set(allow, (map = new Map()));
    if (map.size >= this.max) map.clear();
    map.set(host, { at: this.now(), pinned });
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
  const groups =
    tail === undefined ? headGroups : [...headGroups, ...Array(8 - headGroups.length - tailGroups.length).fill('0'), ...tailGroups];
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

const allowLists = new WeakMap<readonly Cidr[], BlockList>();

/** The allow list as a BlockList, built once per list. */
function allowList(allow: readonly Cidr[]): BlockList {
  let list = allowLists.get(allow);
  if (!list) {
    list = new BlockList();
    for (const c of allow) list.addSubnet(c.network, c.prefix, c.family);
    allowLists.set(allow, list);
  }
  return list;
}

/** Why Postern will not call this address, or null when it will. */
export function refusal(address: string, allow: readonly Cidr[] = []): string | null {
  const family = isIP(address);
  if (family === 0) return 'not an IP address';
  // A zone (fe80::1%eth0) names a local link; no public address needs one.
  if (address.includes('%')) return 'scoped to a local interface';
  if (allowList(allow).check(address, family === 4 ? 'ipv4' : 'ipv6')) return null;
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

const verdicts = new WeakMap<readonly Cidr[], Map<string, string | null>>();

/** refusal(), remembered per allow list: the same address is checked for every delivery to it. */
function refusalOf(address: string, allow: readonly Cidr[]): string | null {
  let known = verdicts.get(allow);
  if (!known) verdicts.set(allow, (known = new Map()));
  return remembered(known, address, (a) => refusal(a, allow));
}

let defaultDns: WebhookDns | null = null;

/** Without a resolver of the caller's: the system's name servers, with the settings' defaults (lib/config.ts). */
const systemResolver: Resolver = (hostname, project) => {
  defaultDns ??= new WebhookDns({ servers: null, timeoutMs: 2000, tries: 2, negativeTtlMs: 60_000, perProject: 4 });
  return defaultDns.resolve(hostname, project);
};

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

/** A failure to connect, named by the URL's host (not the address it resolved to) and the error's code. */
function describe(err: NodeJS.ErrnoException, target: Target, address: string): WebhookClientError {
  const code = err.code ?? '';
  const host = isIP(target.host) === 6 ? `[${target.host}]` : target.host;
  if (target.isHttps && (TLS_CODE.test(code) || /ssl|tls|certificate/i.test(err.message))) {
    return new WebhookClientError('tls', `TLS with ${host} failed: ${code || 'handshake error'}`, address);
  }
  return new WebhookClientError('connection', `connecting to ${host} failed: ${code || 'connection error'}`, address);
}

const targets = new Map<string, Target | WebhookClientError>();

/** The URL parsed and its form checked, once per URL (a URL is an endpoint's, used again and again). */
function targetOf(url: string): Target {
  const known = remembered(targets, url, parseTarget);
  if (known instanceof WebhookClientError) throw known;
  return known;
}

function parseTarget(url: string): Target | WebhookClientError {
  let target: URL;
  try {
    target = new URL(url);
  } catch {
    return new WebhookClientError('invalid-url', 'the webhook URL does not parse');
  }
  if ((target.protocol !== 'http:' && target.protocol !== 'https:') || target.hostname === '') {
    return new WebhookClientError('invalid-url', 'a webhook URL is http:// or https:// with a host');
  }
  // Credentials in the URL would be sent to whoever answers; the secret signs instead.
  if (target.username !== '' || target.password !== '') {
    return new WebhookClientError('invalid-url', 'a webhook URL carries no user name or password');
  }
  // WHATWG URL has already turned 2130706433, 0x7f.1 and 017700000001 into 127.0.0.1.
  const host = target.hostname.replace(/^\[|\]$/g, '');
  return { url: target, isHttps: target.protocol === 'https:', host, path: `${target.pathname}${target.search}`, origin: target.origin };
}

/**
 * One attempt's deadline and cancellation: one timer, and what to stop when either comes (the
 * lookup waiting on `expired`, the request through `stop`).
 */
class Attempt {
  private readonly timer: NodeJS.Timeout;
  private rejectExpired: ((err: WebhookClientError) => void) | null = null;
  /** Set by the request under way: abandons it with the error. */
  stop: ((err: WebhookClientError) => void) | null = null;
  over: WebhookClientError | null = null;

  constructor(
    timeoutMs: number,
    private readonly signal: AbortSignal | undefined,
  ) {
    this.timer = setTimeout(() => this.end(new WebhookClientError('timeout', `no answer within ${timeoutMs} ms`)), timeoutMs);
    if (signal?.aborted) this.over = new WebhookClientError('cancelled', 'the attempt was cancelled');
    else if (signal) attemptsUnder(signal).add(this);
  }

  /** Rejects when the attempt's time is up (for racing the lookup). */
  expired(): Promise<never> {
    return new Promise<never>((_, reject) => {
      if (this.over) reject(this.over);
      else this.rejectExpired = reject;
    });
  }

  cancel(): void {
    this.end(new WebhookClientError('cancelled', 'the attempt was cancelled'));
  }

  private end(err: WebhookClientError): void {
    if (this.over) return;
    this.over = err;
    this.rejectExpired?.(err);
    this.stop?.(err);
  }

  /** The attempt is over, however: the timer and the listener go. */
  close(): void {
    clearTimeout(this.timer);
    if (this.signal) underSignal.get(this.signal)?.delete(this);
  }
}

/**
 * The attempts a signal would cancel: one listener per signal (the dispatcher passes the same one
 * to every attempt), not one added and removed per attempt.
 */
const underSignal = new WeakMap<AbortSignal, Set<Attempt>>();

function attemptsUnder(signal: AbortSignal): Set<Attempt> {
  let set = underSignal.get(signal);
  if (!set) {
    const attempts = (set = new Set());
    underSignal.set(signal, attempts);
    signal.addEventListener(
      'abort',
      () => {
        for (const a of [...attempts]) a.cancel();
      },
      { once: true },
    );
  }
  return set;
}

/** The address to connect to for `host`, every address it resolves to having been checked: at once when known, else a promise. */
function pin(
  host: string,
  allow: readonly Cidr[],
  options: WebhookPostOptions,
  attempt: Attempt,
): ResolvedAddress | Promise<ResolvedAddress> {
  if (isIP(host) !== 0) {
    const why = refusalOf(host, allow);
    if (why !== null) throw new WebhookClientError('refused-address', `${host}: ${why}`, host);
    return { address: host, family: isIP(host) };
  }
  return options.verdicts?.get(allow, host) ?? resolveAndCheck(host, allow, options, attempt);
}

async function resolveAndCheck(
  host: string,
  allow: readonly Cidr[],
  options: WebhookPostOptions,
  attempt: Attempt,
): Promise<ResolvedAddress> {
  const resolving = (options.resolve ?? systemResolver)(host, options.project ?? '');
  let addresses: ResolvedAddress[];
  try {
    addresses = await Promise.race([resolving, attempt.expired()]);
  } catch (err) {
    if (err instanceof WebhookClientError) throw err;
    const code = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
    throw new WebhookClientError('dns', `resolving ${host} failed: ${code}`);
  }
  if (addresses.length === 0) throw new WebhookClientError('dns', `${host} resolves to no address`);
  // Every address, not just the one used: a name must not be able to point inside at all.
  for (const a of addresses) {
    const why = refusalOf(a.address, allow);
    // Neither the address nor which kind it is: the owner learns only that the name is refused.
    if (why !== null)
      throw new WebhookClientError('refused-address', `${host} resolves to an address Postern does not call (docs/webhooks.md)`, a.address);
  }
  const pinned = { address: addresses[0]!.address, family: addresses[0]!.family };
  options.verdicts?.set(allow, host, pinned);
  return pinned;
}

/**
 * POST `body` to `url`, having checked where it goes. Resolves with the receiver's answer (any
 * status, a 3xx included: redirects are not followed); rejects with a WebhookClientError.
 */
export async function postWebhook(url: string, options: WebhookPostOptions): Promise<WebhookResponse> {
  const started = performance.now();
  const target = targetOf(url);
  const allow = options.allow ?? [];
  // The attempt's one timer: it ends whatever stage the attempt is at.
  const attempt = new Attempt(options.timeoutMs ?? DEFAULT_TIMEOUT_MS, options.signal);
  let own: Pool | null = null;
  try {
    const known = pin(target.host, allow, options, attempt);
    const pinned = known instanceof Promise ? await known : known;
    if (attempt.over) throw attempt.over;
    // Pooled only with connections to the very address checked for this attempt (WebhookConnections).
    const pool = options.connections ? options.connections.poolFor(target, pinned.address) : (own = connectTo(target, pinned.address, 1));
    return await send(pool, target, pinned, options, options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES, attempt, started);
  } finally {
    attempt.close();
    if (own) void own.destroy().catch(() => undefined);
  }
}

/** The request itself, through undici's handler interface (no stream, no AbortSignal of its own per attempt). */
function send(
  pool: Pool,
  target: Target,
  pinned: ResolvedAddress,
  options: WebhookPostOptions,
  maxBodyBytes: number,
  attempt: Attempt,
  started: number,
): Promise<WebhookResponse> {
  const body = Buffer.from(options.body);
  // Header names are case-insensitive: one of each, ours for the length.
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  for (const name in options.headers) headers[name.toLowerCase()] = options.headers[name]!;
  headers['content-length'] = String(body.length);
  return new Promise<WebhookResponse>((resolve, reject) => {
    let controller: Dispatcher.DispatchController | null = null;
    let settled = false;
    let status = 0;
    let retryAfter: string | undefined;
    const chunks: Buffer[] = [];
    let length = 0;
    const answer = (): void => {
      if (settled) return;
      settled = true;
      resolve({
        status,
        retryAfterSeconds: parseRetryAfter(retryAfter),
        bodySnippet: Buffer.concat(chunks).subarray(0, maxBodyBytes).toString('utf8'),
        ms: Math.round(performance.now() - started),
      });
    };
    const fail = (err: WebhookClientError): void => {
      if (settled) return;
      settled = true;
      reject(err);
    };
    // The deadline or the caller: the attempt fails now, and the request goes (once it has started).
    attempt.stop = (err) => {
      if (settled) return;
      fail(err);
      controller?.abort(err);
    };
    try {
      pool.dispatch(
        { method: 'POST', path: target.path, headers, body, headersTimeout: 0, bodyTimeout: 0 },
        {
          onRequestStart(c) {
            controller = c;
            if (settled) c.abort(attempt.over ?? new Error('the attempt is over'));
          },
          onResponseStart(_c, statusCode, answerHeaders) {
            status = statusCode;
            const value = answerHeaders['retry-after'];
            retryAfter = Array.isArray(value) ? value[0] : value;
          },
          onResponseData(c, chunk) {
            chunks.push(chunk);
            length += chunk.length;
            // An answer longer than we read is not read on: that socket goes. One read to its end may be reused.
            if (length >= maxBodyBytes) {
              answer();
              c.abort(new Error('the answer is longer than is read'));
            }
          },
          onResponseEnd() {
            answer();
          },
          onResponseError(_c, err) {
            // Cut short by the receiver after its status: the status stands, with what arrived.
            if (status !== 0) answer();
            else fail(describe(causeOf(err), target, pinned.address));
          },
        },
      );
    } catch (err) {
      fail(describe(causeOf(err), target, pinned.address));
    }
  });
}

/** undici wraps some socket errors; the socket's own says what happened. */
function causeOf(err: unknown): NodeJS.ErrnoException {
  const e = err as NodeJS.ErrnoException & { cause?: unknown };
  if (e.cause instanceof Error && !e.code?.startsWith('ECONN') && (e.cause as NodeJS.ErrnoException).code) return e.cause;
  return e;
}

/**
 * The dispatcher's way to reach receivers (lib/webhooks/ports.ts Poster): postWebhook with
 * the service's settings, a refusal or a failure to connect being an answer, not a throw.
 */
export function webhookPoster(settings: {
  allow: readonly Cidr[];
  timeoutMs: number;
  connections: WebhookConnections;
  verdicts?: AddressVerdicts;
  resolve?: Resolver;
}): Poster {
  return async (url, headers, body, signal, project) => {
    const started = performance.now();
    try {
      // One literal of a fixed shape per attempt (absent settings are undefined, which postWebhook reads as absent).
      const r = await postWebhook(url, {
        headers,
        body,
        allow: settings.allow,
        timeoutMs: settings.timeoutMs,
        connections: settings.connections,
        verdicts: settings.verdicts,
        resolve: settings.resolve,
        project,
        signal,
      });
      return { ok: true, status: r.status, retryAfterSeconds: r.retryAfterSeconds, ms: Math.round(r.ms) };
    } catch (err) {
      if (!(err instanceof WebhookClientError)) throw err;
      return { ok: false, error: err.message, ms: Math.round(performance.now() - started), cancelled: err.reason === 'cancelled' };
    }
  };
}
