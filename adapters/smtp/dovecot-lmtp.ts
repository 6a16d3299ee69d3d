// LocalDelivery over LMTP: hands a message to Dovecot's LMTP service. Sessions are pooled:
// opening one costs a connect, a greeting and LHLO per message (measured 50-100 ms under load),
// so a finished session is RSET and kept for the next message. Dovecot answers each recipient
// after DATA; those answers are passed back as they are.
import { Readable } from 'node:stream';
import SMTPConnection from 'nodemailer/lib/smtp-connection';
import type { DeliveryOutcome, Envelope, LocalDelivery } from '../../lib/mail/ingress.ts';

export interface LmtpTarget {
  host: string;
  port: number;
}

const CONNECT_TIMEOUT_MS = 10_000;
/** Dovecot writes the message (and runs Sieve) before answering: allow large messages time. */
const SOCKET_TIMEOUT_MS = 120_000;
/**
 * Idle sessions kept. Each holds one Dovecot lmtp process (client_limit 1), so the bound is
 * small; deliveries beyond it open their own session and close it after use.
 */
const POOL_SIZE = 8;
/** An idle session is closed after this long: a quiet ingress holds no Dovecot processes. */
const IDLE_MS = 30_000;

type SmtpError = SMTPConnection.SMTPError & { recipient?: string; rejectedErrors?: SmtpError[] };

function refused(err: SmtpError): DeliveryOutcome {
  const code = err.responseCode ?? 451;
  const reply = (err.response ?? err.message).replace(/^\d{3}[ -]/, '').trim() || 'refused by the mail store';
  return { ok: false, code, reply };
}

/** One LMTP session to Dovecot; `alive` turns false once it errored or the server closed it. */
interface Session {
  conn: SMTPConnection;
  alive: boolean;
  idleTimer?: NodeJS.Timeout;
}

/** A failure on the connection itself, and whether the message data had started to go out. */
class SessionFailure extends Error {
  constructor(
    override readonly cause: Error,
    readonly dataStarted: boolean,
  ) {
    super(cause.message);
  }
}

export class DovecotLmtp implements LocalDelivery {
  private readonly idle: Session[] = [];
  private closed = false;

  constructor(
    private readonly target: LmtpTarget,
    private readonly poolSize = POOL_SIZE,
  ) {}

  async deliver(envelope: Envelope, message: Uint8Array): Promise<DeliveryOutcome[]> {
    const data = Buffer.from(message.buffer, message.byteOffset, message.length);
    try {
      return await this.attempt(envelope, data);
    } catch (err) {
      // A pooled session may have died since its last use (Dovecot's idle timeout, a restart).
      // Retried once on a fresh session, but only while no DATA went out: after the data,
      // Dovecot may have delivered to some recipients, and Postfix's retry (a 4xx) is the
      // honest answer.
      if (!(err instanceof SessionFailure)) throw err;
      if (err.dataStarted || this.closed) throw err.cause;
      try {
        return await this.attempt(envelope, data, true);
      } catch (again) {
        throw again instanceof SessionFailure ? again.cause : again;
      }
    }
  }

  /** Closes every idle session; sessions under way close when their delivery ends. */
  async close(): Promise<void> {
    this.closed = true;
    for (const s of this.idle.splice(0)) this.discard(s, true);
  }

  private async attempt(envelope: Envelope, data: Buffer, fresh = false): Promise<DeliveryOutcome[]> {
    const session = (fresh ? undefined : this.take()) ?? (await this.open());
    let dataStarted = false;
    // Read only after Dovecot's 354 to DATA: until then nothing can have been delivered.
    const body = new Readable({
      read() {
        dataStarted = true;
        this.push(data);
        this.push(null);
      },
    });
    let outcomes: DeliveryOutcome[];
    try {
      outcomes = await new Promise<DeliveryOutcome[]>((resolve, reject) => {
        const onError = (err: Error) => reject(new SessionFailure(err, dataStarted));
        session.conn.once('error', onError);
        session.conn.send({ from: envelope.from, to: envelope.to }, body, (sendErr, info) => {
          session.conn.off('error', onError);
          const e = sendErr;
          // Every recipient refused at RCPT: an envelope error carrying each refusal.
          if (e && e.code === 'EENVELOPE' && e.rejectedErrors?.length) return resolve(this.outcomes(envelope, e.rejectedErrors));
          if (e) {
            // A 5xx/4xx to DATA itself applies to every recipient; anything else is the connection.
            if (e.responseCode) return resolve(envelope.to.map(() => refused(e)));
            return reject(new SessionFailure(e, dataStarted));
          }
          resolve(this.outcomes(envelope, info.rejectedErrors ?? []));
        });
      });
    } catch (err) {
      this.discard(session, false);
      throw err;
    }
    this.release(session);
    return outcomes;
  }

  /** The most recently used idle session still alive, if any. */
  private take(): Session | undefined {
    for (let s = this.idle.pop(); s; s = this.idle.pop()) {
      clearTimeout(s.idleTimer);
      if (s.alive) return s;
      this.discard(s, false);
    }
    return undefined;
  }

  private open(): Promise<Session> {
    const conn = new SMTPConnection({
      host: this.target.host,
      port: this.target.port,
      lmtp: true,
      secure: false,
      ignoreTLS: true,
      name: 'postern-ingress',
      connectionTimeout: CONNECT_TIMEOUT_MS,
      greetingTimeout: CONNECT_TIMEOUT_MS,
      socketTimeout: SOCKET_TIMEOUT_MS,
    });
    const session: Session = { conn, alive: true };
    // Listeners for the session's whole life: an idle session can die at any time.
    conn.on('error', () => (session.alive = false));
    conn.on('end', () => (session.alive = false));
    return new Promise((resolve, reject) => {
      // A refused or failed connect arrives as 'error' (or, for a silent close, in the callback).
      const failed = (err: Error) => {
        session.alive = false;
        conn.close();
        reject(new SessionFailure(err, false));
      };
      conn.once('error', failed);
      conn.connect((err) => {
        conn.off('error', failed);
        if (err) return failed(err);
        resolve(session);
      });
    });
  }

  /** After a finished delivery: RSET and back to the pool, or closed when there is no room. */
  private release(session: Session): void {
    if (!session.alive || this.closed || this.idle.length >= this.poolSize) return this.discard(session, true);
    session.conn.reset((err) => {
      if (err || !session.alive || this.closed || this.idle.length >= this.poolSize) return this.discard(session, !err);
      session.idleTimer = setTimeout(() => {
        const i = this.idle.indexOf(session);
        if (i >= 0) this.idle.splice(i, 1);
        this.discard(session, true);
      }, IDLE_MS);
      session.idleTimer.unref();
      this.idle.push(session);
    });
  }

  /** Ends a session: QUIT when it is still usable, otherwise the socket is simply closed. */
  private discard(session: Session, polite: boolean): void {
    clearTimeout(session.idleTimer);
    const usable = session.alive;
    session.alive = false;
    if (polite && usable) session.conn.quit();
    else session.conn.close();
  }

  /** Each recipient's answer: its refusal, if there was one, otherwise accepted. */
  private outcomes(envelope: Envelope, rejected: SmtpError[]): DeliveryOutcome[] {
    const byRecipient = new Map<string, SmtpError[]>();
    for (const err of rejected) {
      const key = (err.recipient ?? '').toLowerCase();
      byRecipient.set(key, [...(byRecipient.get(key) ?? []), err]);
    }
    return envelope.to.map((to) => {
      const err = byRecipient.get(to.toLowerCase())?.shift();
      return err ? refused(err) : { ok: true };
    });
  }
}
