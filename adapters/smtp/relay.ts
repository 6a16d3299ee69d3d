// The relay: Postfix's submission service, reached with nodemailer's SMTPConnection and
// authenticated as the inbox's own user (SASL through Dovecot, logging in with the master user:
// "user*master"). Postfix then applies to Postern exactly what it applies to that user's mail
// app: the sender-login check, size and recipient limits, any policy service.
//
// One pool of connections per inbox user, since SMTP AUTH is per connection; a pool nobody used
// for a while is closed. The message is already built (the client's bytes, Bcc removed), so it
// goes to SMTPConnection as it is: nodemailer's transport would first run it through its mail
// composer and MIME stream, which cost as much CPU per send as the SMTP conversation itself
// (bench/RESULTS.md, "Sending"). Postfix's replies are mapped here: 5xx is permanent, anything
// else (4xx, a timeout, no connection) is temporary.
import { Readable } from 'node:stream';
import SMTPConnection from 'nodemailer/lib/smtp-connection';
import type { Logger } from 'pino';
import { RelayRefused, type Relay, type RelayAccepted, type RelayRequest } from '../../lib/send/ports.ts';

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

interface SmtpError extends Error {
  code?: string;
  responseCode?: number;
  response?: string;
  recipient?: string;
}

const IDLE_CLOSE_MS = 60_000;
/** Messages per connection before it is replaced (as nodemailer's pool did with maxMessages). */
const MAX_MESSAGES = 1000;

/** One authenticated connection: free for the next message, or busy with one. */
interface Lane {
  conn: SMTPConnection;
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
      lane.conn.close();
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

  private connect(): Promise<Lane> {
    const conn = new SMTPConnection({
      host: this.s.host,
      port: this.s.port,
      secure: this.s.secure,
      // With secure=false STARTTLS is used when offered, as a mail app would.
      connectionTimeout: this.s.timeoutMs,
      greetingTimeout: this.s.timeoutMs,
      socketTimeout: this.s.timeoutMs,
      logger: false,
    });
    const lane: Lane = { conn, messages: 0, dead: false, gone: false };
    return new Promise((resolve, reject) => {
      let settled = false;
      const fail = (err: unknown) => {
        if (settled) return;
        settled = true;
        lane.dead = true;
        conn.close();
        reject(err);
      };
      // After the login, a failure while idle (Postfix ending the session) retires the lane;
      // a failure during a send reaches that send's callback too.
      conn.on('error', (err: Error) => {
        if (!settled) return fail(err);
        this.log.debug({ err, user: this.user }, 'relay connection failed');
        this.died(lane);
      });
      conn.once('end', () => {
        if (!settled) return fail(Object.assign(new Error('Connection closed unexpectedly'), { code: 'ECONNECTION' }));
        this.died(lane);
      });
      conn.connect((err) => {
        if (err) return fail(err);
        if (!conn.allowsAuth) {
          settled = true;
          return resolve(lane);
        }
        conn.login({ credentials: { user: `${this.user}${this.s.masterSeparator}${this.s.masterUser}`, pass: this.s.masterPassword } }, (loginErr) => {
          if (loginErr) return fail(loginErr);
          settled = true;
          resolve(lane);
        });
      });
    });
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
        const e = err as SmtpError;
        // Postfix lost its connection to Dovecot's auth service (Dovecot restarted): each smtpd
        // process reconnects for its next login, so a few more tries on fresh connections (which
        // may meet other smtpd processes that have not noticed yet) are worth it.
        if (attempt < 3 && e.code === 'EAUTH' && (e.responseCode ?? 0) >= 400 && (e.responseCode ?? 0) < 500) {
          await new Promise((r) => setTimeout(r, 100 * (attempt + 1)));
          continue;
        }
        throw refusal(e);
      }
      // A stream, so that whether any of the message was handed to the socket is known; of
      // slices of the message's pieces, never joined: SMTPConnection's dot-stuffing copies each
      // chunk it changes, so one 25 MB chunk with a line starting with "." would cost another
      // 25 MB, a slice 256 KB.
      const message = new Readable({ read() {} });
      for (const slice of slices(req.raw)) message.push(slice);
      message.push(null);
      try {
        const info = await new Promise<SMTPConnection.SentMessageInfo>((resolve, reject) => {
          lane.conn.send(
            // Bounces come back to the inbox naming this id (Original-Envelope-Id) and the headers only.
            { from: req.from, to: [...req.to], dsn: { envid: req.envid, ret: 'HDRS', notify: ['FAILURE', 'DELAY'] } },
            message,
            (err, sent) => (err ? reject(err) : resolve(sent!)),
          );
        });
        lane.messages++;
        pool.release(lane, true);
        return {
          reply: info.response ?? '',
          rejected: (info.rejectedErrors ?? []).map((e, i) => ({ recipient: (e as SmtpError).recipient ?? info.rejected[i] ?? '', reply: e.response ?? e.message })),
        };
      } catch (err) {
        const e = err as SmtpError;
        lane.messages++;
        // A connection that sat idle may have been closed by Postfix just now: when not a byte
        // of the message went out, it goes again on a fresh connection (nodemailer's pool did too).
        if (reused && !message.readableDidRead && lane.dead && attempt < 3) {
          pool.release(lane, false);
          continue;
        }
        // Refused or failed: the connection goes (a refusal is rare; a fresh session costs a login).
        pool.release(lane, false);
        throw refusal(e);
      }
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

/** The message goes to SMTPConnection in slices of at most this size. */
const SLICE_BYTES = 256 * 1024;

function* slices(pieces: readonly Buffer[]): Generator<Buffer> {
  for (const piece of pieces) {
    for (let at = 0; at < piece.length; at += SLICE_BYTES) yield piece.subarray(at, at + SLICE_BYTES);
  }
}

/** Postfix's answer (or the lack of one) as a permanent or temporary refusal. */
function refusal(err: SmtpError): RelayRefused {
  const reply = (err.response ?? '').trim();
  const code = err.responseCode;
  if (err.code === 'EAUTH') {
    // The relay refused Postern's own login: a deployment problem, not the sender's; retry later.
    return new RelayRefused(false, `the relay refused Postern's login (${reply || err.message})`);
  }
  if (typeof code === 'number' && code >= 500) return new RelayRefused(true, reply || err.message);
  if (typeof code === 'number' && code >= 400) return new RelayRefused(false, reply || err.message);
  // SMTPConnection refusing before DATA because the relay's advertised SIZE is smaller.
  if (err.code === 'EMESSAGE') return new RelayRefused(true, err.message);
  return new RelayRefused(false, err.code ? `${err.code}: ${err.message}` : err.message);
}
