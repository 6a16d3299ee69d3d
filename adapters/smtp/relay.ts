// The relay: Postfix's submission service, reached with nodemailer's pooled SMTP transport and
// authenticated as the inbox's own user (SASL through Dovecot, logging in with the master user:
// "user*master"). Postfix then applies to Postern exactly what it applies to that user's mail
// app: the sender-login check, size and recipient limits, any policy service.
//
// One pool per inbox user, since SMTP AUTH is per connection; a pool nobody used for a while is
// closed. Postfix's replies are mapped here: 5xx is permanent, anything else (4xx, a timeout,
// no connection) is temporary.
import { Readable } from 'node:stream';
import nodemailer from 'nodemailer';
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
}

interface SentInfo {
  response?: string;
  rejected?: Array<string | { address: string }>;
  rejectedErrors?: SmtpError[];
}

const IDLE_CLOSE_MS = 60_000;

type Transport = ReturnType<typeof nodemailer.createTransport>;

export class SmtpRelay implements Relay {
  private readonly pools = new Map<string, { transport: Transport; lastUsed: number }>();
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    private readonly s: RelaySettings,
    private readonly log: Logger,
  ) {
    this.sweeper = setInterval(() => this.closeIdle(Date.now() - IDLE_CLOSE_MS), IDLE_CLOSE_MS / 2);
    this.sweeper.unref();
  }

  async send(req: RelayRequest): Promise<RelayAccepted> {
    let info: SentInfo;
    for (let attempt = 0; ; attempt++) {
      try {
        info = (await this.pool(req.user).sendMail({
          envelope: { from: req.from, to: [...req.to] },
          // A new stream for every attempt: a stream is read once.
          raw: content(req.raw),
          // Bounces come back to the inbox naming this id (Original-Envelope-Id) and the headers only.
          dsn: { id: req.envid, return: 'headers', notify: ['failure', 'delay'] },
        })) as SentInfo;
        break;
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
    }
    const errors = info.rejectedErrors ?? [];
    return {
      reply: info.response ?? '',
      rejected: errors.map((e, i) => ({
        recipient: (e as SmtpError & { recipient?: string }).recipient ?? addressOf(info.rejected?.[i]),
        reply: e.response ?? e.message,
      })),
    };
  }

  async close(): Promise<void> {
    clearInterval(this.sweeper);
    this.closeIdle(Infinity);
  }

  private pool(user: string): Transport {
    let p = this.pools.get(user);
    if (!p) {
      const transport = nodemailer.createTransport({
        pool: true,
        host: this.s.host,
        port: this.s.port,
        secure: this.s.secure,
        // On a private network Postfix may offer STARTTLS with a certificate for another name;
        // with secure=false nodemailer uses STARTTLS when offered, as a mail app would.
        maxConnections: this.s.maxPerInbox,
        maxMessages: 1000,
        connectionTimeout: this.s.timeoutMs,
        greetingTimeout: this.s.timeoutMs,
        socketTimeout: this.s.timeoutMs,
        auth: { user: `${user}${this.s.masterSeparator}${this.s.masterUser}`, pass: this.s.masterPassword },
        logger: false,
      });
      transport.on('error', (err: Error) => this.log.warn({ err, user }, 'relay pool error'));
      p = { transport, lastUsed: 0 };
      this.pools.set(user, p);
    }
    p.lastUsed = Date.now();
    return p.transport;
  }

  private closeIdle(before: number): void {
    for (const [user, p] of this.pools) {
      if (p.lastUsed < before) {
        p.transport.close();
        this.pools.delete(user);
      }
    }
  }
}

/** Larger messages are handed to nodemailer as a stream of slices of this size. */
const SLICE_BYTES = 256 * 1024;

/**
 * What nodemailer sends: a small message as one buffer; a larger one as a stream of slices of
 * its pieces, never joined. nodemailer's dot-stuffing copies each chunk it changes, so one
 * 25 MB chunk with a line starting with "." would cost a second 25 MB; a slice costs 256 KB.
 */
function content(pieces: readonly Buffer[]): Buffer | Readable {
  const size = pieces.reduce((n, piece) => n + piece.length, 0);
  if (size <= SLICE_BYTES) return pieces.length === 1 ? pieces[0]! : Buffer.concat(pieces, size);
  return Readable.from(slices(pieces), { objectMode: false });
}

function* slices(pieces: readonly Buffer[]): Generator<Buffer> {
  for (const piece of pieces) {
    for (let at = 0; at < piece.length; at += SLICE_BYTES) yield piece.subarray(at, at + SLICE_BYTES);
  }
}

function addressOf(r: string | { address: string } | undefined): string {
  return typeof r === 'string' ? r : (r?.address ?? '');
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
  // nodemailer refusing before DATA because the relay's advertised SIZE is smaller.
  if (err.code === 'EMESSAGE') return new RelayRefused(true, err.message);
  return new RelayRefused(false, err.code ? `${err.code}: ${err.message}` : err.message);
}
