// Resource subscriptions for MCP clients. Postern serves MCP statelessly (docs/mcp.md): each
// request may reach any process, so a subscription cannot live in the request that made it.
// It is kept per credential instead, in every process, told to all of them over the bus; and
// the client's GET stream, wherever it is open, watches the inboxes its credential subscribed
// to and turns their live changes into notifications/resources/updated. A subscription its
// credential may no longer have (the token revoked or expired, the inbox's grant withdrawn) is
// dropped, everywhere: found by the stream's re-check (StreamGuard) or at a change, whichever
// comes first.
import type { Access, Principal } from '../auth/access.ts';
import type { Bus, Unsubscribe } from '../bus.ts';
import { isDomainError, unprocessable } from '../errors.ts';
import type { Standing } from '../http/stream-guard.ts';
import type { MailService } from '../mail/service.ts';
import type { Unwatch } from '../mail/ports.ts';
import type { WarnLog } from '../warn-log.ts';

const CHANNEL = 'mcp.subscriptions';
/** Inboxes one credential may be subscribed to at once. */
export const MAX_SUBSCRIPTIONS = 100;

export const INBOX_URI_PREFIX = 'postern://inboxes/';
export const inboxUri = (inboxId: string) => `${INBOX_URI_PREFIX}${inboxId}`;
export function inboxOfUri(uri: string): string | null {
  return uri.startsWith(INBOX_URI_PREFIX) ? uri.slice(INBOX_URI_PREFIX.length) : null;
}

interface Change {
  credentialId: string;
  inboxId: string;
  on: boolean;
}

const READ = { token: 'messages:read', session: false } as const;

/** A refusal that says the caller may no longer read the inbox (not a store that cannot answer now). */
const lostAccess = (err: unknown): boolean => isDomainError(err) && err.kind !== 'unavailable';

/** An open GET stream as its route holds it. */
export interface OpenStream {
  /** The stream closed: it stops watching. */
  close(): void;
  /** The stream's re-check (StreamGuard): drops the subscriptions whose inbox the credential may no longer read. */
  recheck(now: Standing): Promise<void>;
  /** The credential may no longer be served (revoked, expired): its subscriptions are dropped and the stream ends. */
  refused(): void;
}

/** One open GET stream: the inboxes it watches for its credential, and how to tell its client. */
class LiveStream {
  readonly watching = new Map<string, Promise<Unwatch | null>>();
  closed = false;
  constructor(
    readonly principal: Principal,
    readonly notify: (uri: string) => Promise<void>,
    readonly end: () => void,
  ) {}
}

export interface McpSubscriptionsOptions {
  bus: Bus;
  mail: MailService;
  access: Access;
  log: WarnLog;
}

export class McpSubscriptions {
  private readonly wanted = new Map<string, Set<string>>();
  private readonly streams = new Map<string, Set<LiveStream>>();
  private stopBus: Unsubscribe | null = null;

  private readonly bus: Bus;
  private readonly mail: MailService;
  private readonly access: Access;
  private readonly log: WarnLog;

  constructor(o: McpSubscriptionsOptions) {
    this.bus = o.bus;
    this.mail = o.mail;
    this.access = o.access;
    this.log = o.log;
  }

  async start(): Promise<void> {
    this.stopBus = await this.bus.subscribe(CHANNEL, (message) => {
      try {
        this.apply(JSON.parse(message) as Change);
      } catch (err) {
        this.log.warn({ err }, 'an MCP subscription message could not be read');
      }
    });
  }

  async close(): Promise<void> {
    await this.stopBus?.();
    this.stopBus = null;
    for (const set of this.streams.values()) for (const s of set) s.end();
  }

  /** The caller checked that `p` may read the inbox. */
  async subscribe(p: Principal, inboxId: string): Promise<void> {
    const set = this.wanted.get(p.credentialId);
    if (set && !set.has(inboxId) && set.size >= MAX_SUBSCRIPTIONS) {
      throw unprocessable(`at most ${MAX_SUBSCRIPTIONS} inboxes may be subscribed to at once by one token`);
    }
    await this.change({ credentialId: p.credentialId, inboxId, on: true });
  }

  async unsubscribe(p: Principal, inboxId: string): Promise<void> {
    await this.change({ credentialId: p.credentialId, inboxId, on: false });
  }

  /** Applied here at once (the answer must not race the stream) and told to the other processes. */
  private async change(c: Change): Promise<void> {
    this.apply(c);
    await this.bus.publish(CHANNEL, JSON.stringify(c));
  }

  private apply(c: Change): void {
    let set = this.wanted.get(c.credentialId);
    if (c.on) {
      if (!set) this.wanted.set(c.credentialId, (set = new Set()));
      set.add(c.inboxId);
    } else if (set) {
      set.delete(c.inboxId);
      if (set.size === 0) this.wanted.delete(c.credentialId);
    }
    for (const s of this.streams.get(c.credentialId) ?? []) {
      if (c.on) this.watch(s, c.inboxId);
      else this.unwatch(s, c.inboxId);
    }
  }

  /** The inboxes a credential is subscribed to, as this process knows them. */
  subscribed(credentialId: string): ReadonlySet<string> {
    return this.wanted.get(credentialId) ?? new Set();
  }

  /** A GET stream opened: it watches every inbox its credential is subscribed to. */
  open(p: Principal, notify: (uri: string) => Promise<void>, end: () => void): OpenStream {
    const stream = new LiveStream(p, notify, end);
    let set = this.streams.get(p.credentialId);
    if (!set) this.streams.set(p.credentialId, (set = new Set()));
    set.add(stream);
    for (const inboxId of this.wanted.get(p.credentialId) ?? []) this.watch(stream, inboxId);
    const streams = set;
    return {
      close: () => {
        if (stream.closed) return;
        stream.closed = true;
        streams.delete(stream);
        if (streams.size === 0) this.streams.delete(p.credentialId);
        for (const inboxId of [...stream.watching.keys()]) this.unwatch(stream, inboxId);
      },
      recheck: async (now) => {
        this.access.authorize(now.principal, READ);
        for (const inboxId of [...this.subscribed(p.credentialId)]) {
          try {
            await now.once(`inbox|${inboxId}`, () => this.access.inboxAccess(now.principal, inboxId, 'messages:read'));
          } catch (err) {
            if (!lostAccess(err)) throw err;
            await this.drop(p.credentialId, inboxId);
          }
        }
      },
      refused: () => this.refused(stream),
    };
  }

  /** Its credential may no longer be served: every subscription it had goes, and its stream ends. */
  private refused(s: LiveStream): void {
    s.end();
    for (const inboxId of [...this.subscribed(s.principal.credentialId)]) {
      this.drop(s.principal.credentialId, inboxId).catch((err: unknown) =>
        this.log.warn({ err, inboxId }, 'an MCP subscription could not be dropped'),
      );
    }
  }

  private drop(credentialId: string, inboxId: string): Promise<void> {
    return this.change({ credentialId, inboxId, on: false });
  }

  private watch(s: LiveStream, inboxId: string): void {
    if (s.closed || s.watching.has(inboxId)) return;
    const uri = inboxUri(inboxId);
    const started = (async (): Promise<Unwatch | null> => {
      const { inbox } = await this.access.inboxAccess(s.principal, inboxId, 'messages:read');
      const changed = () =>
        void this.tell(s, inboxId, uri).catch((err: unknown) => this.log.warn({ err, inboxId }, 'an MCP resource notification failed'));
      // A gap (changes from other processes may be lost) is told as a change: the client re-reads.
      return this.mail.watch(inbox, changed, changed);
    })().catch((err: unknown) => {
      if (!isDomainError(err)) this.log.warn({ err, inboxId }, 'an MCP subscription could not watch its inbox');
      s.watching.delete(inboxId);
      if (lostAccess(err))
        void this.drop(s.principal.credentialId, inboxId).catch((e: unknown) =>
          this.log.warn({ err: e, inboxId }, 'an MCP subscription could not be dropped'),
        );
      return null;
    });
    s.watching.set(inboxId, started);
  }

  private unwatch(s: LiveStream, inboxId: string): void {
    const started = s.watching.get(inboxId);
    if (!started) return;
    s.watching.delete(inboxId);
    void started
      .then((stop) => stop?.())
      .catch((err: unknown) => this.log.warn({ err, inboxId }, 'an MCP subscription could not stop watching'));
  }

  /**
   * Each notification re-checks the credential and its reach, as a new request would: a revoked
   * token's subscriptions are dropped and its stream ends, a withdrawn grant drops that inbox's,
   * before anything is told.
   */
  private async tell(s: LiveStream, inboxId: string, uri: string): Promise<void> {
    try {
      const now = await this.access.principalOfToken(s.principal.credentialId);
      if (!now) {
        this.refused(s);
        return;
      }
      this.access.authorize(now, READ);
      await this.access.inboxAccess(now, inboxId, 'messages:read');
    } catch (err) {
      if (!isDomainError(err)) throw err;
      // The store cannot answer now: this change goes untold (delivery is at most once), the subscription stays.
      if (lostAccess(err)) await this.drop(s.principal.credentialId, inboxId);
      return;
    }
    if (!s.closed) await s.notify(uri).catch(() => s.end());
  }
}
