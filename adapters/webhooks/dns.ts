// How webhook hosts are resolved (docs/webhooks.md, "Resolving hosts"). Not with dns.lookup:
// getaddrinfo runs on libuv's thread pool (four threads, shared with the file system and every
// other lookup of the process: IMAP, SMTP, PostgreSQL, Redis), cannot be cancelled, and keeps no
// failures, so a project's endpoints naming hosts whose servers never answer would stall every
// tenant's lookups. Here: DNS queries through c-ares (dns.promises.Resolver, on the event loop)
// with their own timeout and tries; /etc/hosts and localhost answered first, as getaddrinfo
// would; answers kept for their TTL (bounded), failures for a while; one query per name at a
// time; and at most `perProject` lookups under way for one project.
import { Resolver as DnsResolver } from 'node:dns/promises';
import { readFile, stat } from 'node:fs/promises';
import { isIP } from 'node:net';
import type { ResolvedAddress } from './client.ts';

export interface WebhookDnsOptions {
  /** Name servers (`host` or `host:port`); null: the system's (/etc/resolv.conf, as c-ares reads it). */
  servers: readonly string[] | null;
  /** One try's wait for an answer. */
  timeoutMs: number;
  tries: number;
  /** A failure (no such name, no address, no answer) is answered from memory this long. */
  negativeTtlMs: number;
  /** Lookups under way at once for one project (the rest wait their turn). */
  perProject: number;
  /** /etc/hosts by default (tests give their own). */
  hostsFile?: string;
  now?: () => number;
}

/** An answer is kept at most this long, whatever its TTL says: a change of DNS is seen within it. */
export const MAX_POSITIVE_TTL_MS = 5 * 60_000;
/** Names whose answer (or failure) is kept; past it the oldest go. */
const MAX_NAMES = 4096;
/** /etc/hosts is read again when it changed, looked at no more often than this. */
const HOSTS_CHECK_MS = 5000;

/** A lookup that failed: kept as the error it threw. */
export class WebhookDnsError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = 'WebhookDnsError';
  }
}

interface Known {
  until: number;
  answer: ResolvedAddress[] | WebhookDnsError;
}

/** A name as getaddrinfo compares it: case-insensitive, a trailing dot dropped. */
const canonical = (name: string): string => name.toLowerCase().replace(/\.$/, '');

/** /etc/hosts' entries: name → its addresses, in file order. */
export function parseHosts(text: string): Map<string, ResolvedAddress[]> {
  const out = new Map<string, ResolvedAddress[]>();
  for (const raw of text.split('\n')) {
    const fields = raw.replace(/#.*/, '').trim().split(/\s+/);
    const address = fields[0] ?? '';
    // A zone (fe80::1%eth0) names a local link; the SSRF check refuses it anyway.
    const family = isIP(address.replace(/%.*/, ''));
    if (family === 0) continue;
    for (const name of fields.slice(1)) {
      const key = canonical(name);
      const list = out.get(key) ?? [];
      if (!list.some((a) => a.address === address)) list.push({ address, family });
      out.set(key, list);
    }
  }
  return out;
}

export class WebhookDns {
  private readonly resolver: DnsResolver;
  private readonly now: () => number;
  private readonly known = new Map<string, Known>();
  private readonly pending = new Map<string, Promise<ResolvedAddress[]>>();
  /** Lookups under way per project, and those waiting for one of them to end. */
  private readonly running = new Map<string, number>();
  private readonly waiting = new Map<string, Array<() => void>>();
  private hosts: { map: Map<string, ResolvedAddress[]>; mtimeMs: number; checkedAt: number } | null = null;
  private hostsReading: Promise<void> | null = null;
  private closed = false;

  constructor(private readonly o: WebhookDnsOptions) {
    this.now = o.now ?? Date.now;
    this.resolver = new DnsResolver({ timeout: o.timeoutMs, tries: o.tries });
    if (o.servers) this.resolver.setServers([...o.servers]);
  }

  /**
   * Queries sent and not yet answered are abandoned (they fail with ECANCELLED), and so are
   * lookups waiting for their project's turn: were they to go on to ask, each unanswered query
   * would keep the process alive for its timeout × tries after SIGTERM, one project's share at a
   * time (docs/operations.md, "Health and shutdown").
   */
  close(): void {
    this.closed = true;
    this.resolver.cancel();
    for (const list of this.waiting.values()) for (const wake of list) wake();
    this.waiting.clear();
  }

  /** The addresses `hostname` resolves to, for `project`'s attempt; rejects with a WebhookDnsError. */
  async resolve(hostname: string, project = ''): Promise<ResolvedAddress[]> {
    const name = canonical(hostname);
    const family = isIP(name);
    if (family !== 0) return [{ address: name, family }];
    // As getaddrinfo answers localhost (and RFC 6761 names under it) on Linux: loopback.
    if (name === 'localhost' || name.endsWith('.localhost')) {
      return (
        (await this.fromHosts(name)) ?? [
          { address: '::1', family: 6 },
          { address: '127.0.0.1', family: 4 },
        ]
      );
    }
    const listed = await this.fromHosts(name);
    if (listed) return listed;
    const known = this.known.get(name);
    if (known && known.until > this.now()) {
      if (known.answer instanceof WebhookDnsError) throw known.answer;
      return known.answer;
    }
    // One query per name at a time, whichever project asks (and it counts against the first's share).
    let asking = this.pending.get(name);
    if (!asking) {
      asking = this.lookUp(name, project).finally(() => this.pending.delete(name));
      this.pending.set(name, asking);
    }
    return asking;
  }

  private async lookUp(name: string, project: string): Promise<ResolvedAddress[]> {
    await this.turn(project);
    try {
      if (this.closed) throw new WebhookDnsError('ECANCELLED', `resolving ${name} failed: ECANCELLED`);
      const [v4, v6] = await Promise.allSettled([this.resolver.resolve4(name, { ttl: true }), this.resolver.resolve6(name, { ttl: true })]);
      const addresses: ResolvedAddress[] = [];
      let ttl = MAX_POSITIVE_TTL_MS;
      for (const [result, fam] of [
        [v4, 4],
        [v6, 6],
      ] as const) {
        if (result.status !== 'fulfilled') continue;
        for (const r of result.value) {
          addresses.push({ address: r.address, family: fam });
          ttl = Math.min(ttl, r.ttl * 1000);
        }
      }
      if (addresses.length > 0) {
        this.keep(name, addresses, ttl);
        return addresses;
      }
      // No address of either family: the first failure says why (no data for one family is no failure).
      const failed = [v4, v6].find(
        (r): r is PromiseRejectedResult => r.status === 'rejected' && (r.reason as NodeJS.ErrnoException).code !== 'ENODATA',
      );
      const code = failed ? ((failed.reason as NodeJS.ErrnoException).code ?? 'EFAIL') : 'ENODATA';
      const err = new WebhookDnsError(code, code === 'ENODATA' ? `${name} resolves to no address` : `resolving ${name} failed: ${code}`);
      // Cancelled: the service is stopping, which says nothing of the name.
      if (code !== 'ECANCELLED') this.keep(name, err, this.o.negativeTtlMs);
      throw err;
    } finally {
      this.done(project);
    }
  }

  private keep(name: string, answer: ResolvedAddress[] | WebhookDnsError, ttlMs: number): void {
    if (this.known.size >= MAX_NAMES) {
      const now = this.now();
      for (const [n, k] of this.known) if (k.until <= now) this.known.delete(n);
      // Still full: the oldest entries go (a Map iterates in insertion order).
      for (const n of this.known.keys()) {
        if (this.known.size < MAX_NAMES) break;
        this.known.delete(n);
      }
    }
    this.known.delete(name);
    this.known.set(name, { until: this.now() + ttlMs, answer });
  }

  /** Waits until the project has fewer than perProject lookups under way, then counts this one. */
  private async turn(project: string): Promise<void> {
    while (!this.closed && (this.running.get(project) ?? 0) >= this.o.perProject) {
      await new Promise<void>((resolve) => {
        const list = this.waiting.get(project);
        if (list) list.push(resolve);
        else this.waiting.set(project, [resolve]);
      });
    }
    this.running.set(project, (this.running.get(project) ?? 0) + 1);
  }

  private done(project: string): void {
    const n = (this.running.get(project) ?? 1) - 1;
    if (n === 0) this.running.delete(project);
    else this.running.set(project, n);
    const list = this.waiting.get(project);
    const next = list?.shift();
    if (list && list.length === 0) this.waiting.delete(project);
    next?.();
  }

  /** The name's /etc/hosts addresses, or null; the file is read again when it changed. */
  private async fromHosts(name: string): Promise<ResolvedAddress[] | null> {
    if (!this.hosts || this.now() - this.hosts.checkedAt >= HOSTS_CHECK_MS) {
      this.hostsReading ??= this.readHosts().finally(() => (this.hostsReading = null));
      await this.hostsReading;
    }
    return this.hosts?.map.get(name) ?? null;
  }

  private async readHosts(): Promise<void> {
    const file = this.o.hostsFile ?? '/etc/hosts';
    const at = this.now();
    try {
      const { mtimeMs } = await stat(file);
      if (this.hosts && this.hosts.mtimeMs === mtimeMs) {
        this.hosts.checkedAt = at;
        return;
      }
      this.hosts = { map: parseHosts(await readFile(file, 'utf8')), mtimeMs, checkedAt: at };
    } catch {
      // No hosts file: names go to DNS alone.
      this.hosts = { map: new Map(), mtimeMs: -1, checkedAt: at };
    }
  }
}
