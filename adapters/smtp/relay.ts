// The relay: Postfix's submission service, reached through SubmissionSession and
// authenticated as the inbox's own user (SASL through Dovecot, logging in with the master user:
// "user*master"). Postfix then applies to Postern exactly what it applies to that user's mail
// app: the sender-login check, size and recipient limits, any policy service.
//
// One pool of connections per inbox user, since SMTP AUTH is per connection; a pool nobody used
// for a while is closed. The message is already built (the client's bytes, Bcc removed), so it
// goes out as it is, pipelined (submission-session.ts), its final dot only once the outbox recorded
// it. Postfix's replies are mapped here: 5xx is permanent, anything else (4xx, a timeout, no
// connection) is temporary, except a reply lost after the final dot was written: its outcome is
// unknown.
import type { Logger } from 'pino';
import { unavailable } from '../../lib/errors.ts';
import { SmtpFailure, SubmissionSession } from './submission-session.ts';
import { RelayOutcomeUnknown, RelayRefused, type Relay, type RelayAccepted, type RelayRequest } from '../../lib/send/ports.ts';

export interface RelaySettings {
  host: string;
  port: number;
  secure: boolean;
  /** Connections to the relay per inbox user at most. */
  maxPerInbox: number;
  /** Connection, greeting and socket inactivity timeout. */
  timeoutMs: number;
  /** Dovecot's master user, its password and separator: the login is `<user><separator><master>`. */
  masterUser: string;
  masterPassword: string;
  masterSeparator: string;
}

const IDLE_CLOSE_MS = 60_000;
/** Messages per connection before it is replaced (as nodemailer's pool did with maxMessages). */
const MAX_MESSAGES = 1000;

/** One authenticated connection: free for the next message, or busy with one. */
interface Lane {
  session: SubmissionSession;
  messages: number;
  /** Closed or failed: never handed out again. */
  dead: boolean;
  /** Its slot in the pool was given back (once, however it ended). */
  gone: boolean;
}

/** The connections of one inbox user. */
class UserPool {
  private readonly free: Lane[] = [];
  private open = 0;
  private readonly waiting: Array<(lane: Lane | null) => void> = [];
  lastUsed = 0;
  closed = false;

  constructor(
    private readonly s: RelaySettings,
    private readonly user: string,
    private readonly log: Logger,
  ) {}

  /**
   * A free connection, or a new one while under the limit, or the next one released; null
   * when a slot opened for a new connection instead (the caller connects).
   */
  private take(): Promise<Lane | null> | Lane | null {
    for (let lane = this.free.pop(); lane; lane = this.free.pop()) {
      if (!lane.dead) return lane;
      this.discard(lane);
    }
    if (this.open < this.s.maxPerInbox) {
      this.open++;
      return null;
    }
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  /** A connection for one message, logged in; rejects as the connection or the login failed. */
  async acquire(): Promise<{ lane: Lane; reused: boolean }> {
    this.lastUsed = Date.now();
    const lane = await this.take();
    if (lane) return { lane, reused: true };
    try {
      return { lane: await this.connect(), reused: false };
    } catch (err) {
      this.slotFreed();
      throw err;
    }
  }

  /** The message is done with; the connection serves the next one, or goes. */
  release(lane: Lane, usable: boolean): void {
    if (!usable || lane.dead || this.closed || lane.messages >= MAX_MESSAGES) {
      this.discard(lane);
      return;
    }
    const next = this.waiting.shift();
    if (next) next(lane);
    else this.free.push(lane);
  }

  /**
   * The message's bytes are written: when another send is waiting, it gets the connection now,
   * before this message's final reply (its envelope follows this message's final dot).
   */
  handOver(lane: Lane): boolean {
    if (lane.dead || this.closed || lane.messages >= MAX_MESSAGES) return false;
    const next = this.waiting.shift();
    if (!next) return false;
    next(lane);
    return true;
  }

  /** A connection handed over whose earlier message then failed: it goes, and the send now on it with it. */
  retire(lane: Lane): void {
    if (lane.dead) return;
    lane.dead = true;
    lane.session.close();
  }

  close(): void {
    this.closed = true;
    for (const lane of this.free.splice(0)) this.discard(lane);
    // Each waiter opens its own connection then (discarded when released).
    for (const wake of this.waiting.splice(0)) {
      this.open++;
      wake(null);
    }
  }

  private discard(lane: Lane): void {
    if (!lane.dead) {
      lane.dead = true;
      lane.session.close();
    }
    if (lane.gone) return;
    lane.gone = true;
    this.slotFreed();
  }

  /** A connection ended on its own (Postfix closed an idle session): its slot is free if it was. */
  private died(lane: Lane): void {
    lane.dead = true;
    const at = this.free.indexOf(lane);
    if (at >= 0) {
      this.free.splice(at, 1);
      this.discard(lane);
    }
  }

  /** A connection slot is free: the next waiter opens a connection in it. */
  private slotFreed(): void {
    this.open--;
    const next = this.waiting.shift();
    if (next) {
      this.open++;
      next(null);
    }
  }

  private async connect(): Promise<Lane> {
    const session = await SubmissionSession.open(
      { host: this.s.host, port: this.s.port, secure: this.s.secure, timeoutMs: this.s.timeoutMs },
      { user: `${this.user}${this.s.masterSeparator}${this.s.masterUser}`, pass: this.s.masterPassword },
    );
    const lane: Lane = { session, messages: 0, dead: false, gone: false };
    // Postfix ending an idle session (or a failure during a send) retires the lane.
    session.onEnd(() => {
      this.log.debug({ user: this.user }, 'relay connection ended');
      this.died(lane);
    });
    return lane;
  }
}

export class SmtpRelay implements Relay {
  private readonly pools = new Map<string, UserPool>();
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    private readonly s: RelaySettings,
    private readonly log: Logger,
  ) {
    this.sweeper = setInterval(() => this.closeIdle(Date.now() - IDLE_CLOSE_MS), IDLE_CLOSE_MS / 2);
    this.sweeper.unref();
  }

  async send(req: RelayRequest): Promise<RelayAccepted> {
    for (let attempt = 0; ; attempt++) {
      const pool = this.pool(req.user);
      let lane: Lane;
      let reused: boolean;
      try {
        ({ lane, reused } = await pool.acquire());
      } catch (err) {
        const e = asFailure(err);
        // Postfix lost its connection to Dovecot's auth service (Dovecot restarted): each smtpd
        // process reconnects for its next login, so a few more tries on fresh connections (which
        // may meet other smtpd processes that have not noticed yet) are worth it.
        if (attempt < 3 && e.stage === 'login' && (e.replyCode ?? 0) >= 400 && (e.replyCode ?? 0) < 500) {
          await new Promise((r) => setTimeout(r, 100 * (attempt + 1)));
          continue;
        }
        throw refusal(e);
      }
      lane.messages++;
      // Once this message's bytes are written, a waiting send may have the connection (the
      // session pipelines its envelope behind them); this send still waits for its own reply.
      let handedOver = false;
      try {
        const delivered = await lane.session.send(
          // Bounces come back to the inbox naming this id (Original-Envelope-Id) and the headers only.
          { from: req.from, to: req.to, dsn: { envid: req.envid, ret: 'HDRS', notify: ['FAILURE', 'DELAY'] } },
          req.raw,
          () => (handedOver = pool.handOver(lane)),
          req.writing,
        );
        if (!handedOver) pool.release(lane, true);
        return delivered;
      } catch (err) {
        const e = asFailure(err);
        // Refused or failed: the connection goes (a refusal is rare; a fresh session costs a login).
        // A send it was handed to meanwhile has written none of its message: it goes again
        // on another connection, and gives the slot back.
        if (handedOver) pool.retire(lane);
        else pool.release(lane, false);
        // When the server took none of the message (a connection that sat idle and that Postfix
        // closed just now, or one given up because the message before failed), it goes again
        // on a fresh connection.
        if (reused && e.unsent && attempt < 3) continue;
        // Never sent again: Postfix has most likely queued it.
        if (e.outcomeUnknown) throw new RelayOutcomeUnknown(e.message);
        throw refusal(e);
      }
    }
  }

  /**
   * Readiness: the submission service greets, answers EHLO (and STARTTLS where offered) and
   * NOOP on a fresh connection within `timeoutMs`. No login and no mail: it is asked often.
   */
  async check(timeoutMs: number): Promise<void> {
    const session = await SubmissionSession.open({ host: this.s.host, port: this.s.port, secure: this.s.secure, timeoutMs }, null).catch(
      (err: unknown) => {
        throw unanswered(asFailure(err));
      },
    );
    try {
      await session.noop().catch((err: unknown) => {
        throw unanswered(asFailure(err));
      });
    } finally {
      session.close();
    }
  }

  async close(): Promise<void> {
    clearInterval(this.sweeper);
    this.closeIdle(Infinity);
  }

  private pool(user: string): UserPool {
    let p = this.pools.get(user);
    if (!p) {
      p = new UserPool(this.s, user, this.log);
      this.pools.set(user, p);
    }
    return p;
  }

  private closeIdle(before: number): void {
    for (const [user, p] of this.pools) {
      if (p.lastUsed < before) {
        p.close();
        this.pools.delete(user);
      }
    }
  }
}

/** Why the relay is not ready, as anyone may read it (/readyz is unauthenticated): no address. */
function unanswered(err: SmtpFailure): Error {
  const reply = err.reply?.trim().split('\n')[0];
  if (reply) return unavailable(`SMTP submission answered "${reply.slice(0, 120)}"`);
  const m = err.message;
  return unavailable(
    `SMTP submission did not answer: ${/^E[A-Z]+:/.test(m) ? m.slice(0, m.indexOf(':')) : m.replace(/ (to|at) \S+:\d+/, '')}`,
  );
}

function asFailure(err: unknown): SmtpFailure {
  return err instanceof SmtpFailure ? err : new SmtpFailure(err instanceof Error ? err.message : String(err), 'connection');
}

/** Postfix's answer (or the lack of one) as a permanent or temporary refusal. */
function refusal(err: SmtpFailure): RelayRefused {
  const reply = (err.reply ?? '').trim();
  const code = err.replyCode;
  if (err.stage === 'login') {
    // The relay refused Postern's own login: a deployment problem, not the sender's; retry later.
    return new RelayRefused(false, `the relay refused Postern's login (${reply || err.message})`);
  }
  // Only a refusal of the message itself is permanent: a greeting or EHLO refused is the relay's trouble.
  if (err.stage === 'transaction' && typeof code === 'number' && code >= 500) return new RelayRefused(true, reply || err.message);
  return new RelayRefused(false, reply || err.message);
}
