// One logged-in SMTP session with a submission service, speaking just the conversation the relay
// needs: greeting, EHLO, STARTTLS when offered, AUTH, then transactions. Where the server offers
// PIPELINING (RFC 2920) a transaction is the envelope with DATA in one write, then on 354 the
// message dot-stuffed in one corked write of slices of its pieces (never joined, never copied),
// and its final dot, written once the caller recorded that it may be taken (`writing`; in the
// same write without one). Under load the next message's envelope leaves with this one's final
// dot (see send).
//
// Not CHUNKING (RFC 3030), though Postfix offers it: MAIL, RCPT and `BDAT n LAST` with the bytes
// in one write saves a round trip on paper, but Postfix flushes its first replies while it reads
// the chunk, and its final reply then waits on Nagle for our delayed ACK: 44 ms per message
// against 2 ms with DATA on loopback.
//
// nodemailer's SMTPConnection did this job first; per message it cost about as much CPU as the
// rest of a send's answer (bench/RESULTS.md, "Sending"), on the cores Postfix shares.
import { connect as netConnect, type Socket } from 'node:net';
import { connect as tlsConnect, type TLSSocket } from 'node:tls';
import { StringDecoder } from 'node:string_decoder';

export interface SessionOptions {
  host: string;
  port: number;
  /** TLS from the first byte (port 465); otherwise STARTTLS is used when the server offers it. */
  secure: boolean;
  /** Connecting, the greeting, and each wait for a reply. */
  timeoutMs: number;
  /** The EHLO name. */
  name?: string;
}

export interface Login {
  user: string;
  pass: string;
}

/** What went wrong, with the server's reply when there was one. */
export class SmtpFailure extends Error {
  constructor(
    message: string,
    /** Where: the connection, its login, or the message's transaction. */
    readonly stage: 'connection' | 'login' | 'transaction',
    /** The server's reply code, when it answered. */
    readonly replyCode?: number,
    /** The server's reply, in its own words. */
    readonly reply?: string,
    /** The message's end (its final dot) was never written, so the server cannot have taken it: safe to send again (decided in `send`). */
    readonly unsent = false,
    /**
     * The whole message, its final dot included, was written and the server's reply to it never
     * came: it has most likely taken the message (decided in `send`).
     */
    readonly outcomeUnknown = false,
  ) {
    super(message);
    this.name = 'SmtpFailure';
  }
}

export interface Envelope {
  from: string;
  to: readonly string[];
  /** DSN: the envelope id bounces carry back, and which notices to ask for. */
  dsn?: { envid: string; ret: 'HDRS' | 'FULL'; notify: readonly string[] };
}

export interface Delivered {
  /** The final reply ("250 2.0.0 Ok: queued as …"). */
  reply: string;
  /** Recipients refused while the others were accepted. */
  rejected: Array<{ recipient: string; reply: string }>;
}

interface Reply {
  code: number;
  text: string;
}

type Waiter = { resolve: (r: Reply) => void; reject: (e: SmtpFailure) => void };

const CRLF = Buffer.from('\r\n');
const DOT = Buffer.from('.');
const END = Buffer.from('.\r\n');

export class SubmissionSession {
  private socket!: Socket | TLSSocket;
  private readonly decoder = new StringDecoder('utf8');
  private partial = '';
  private lines: string[] = [];
  private readonly waiting: Waiter[] = [];
  /** EHLO keywords and their parameters ("AUTH" → ["PLAIN", "LOGIN"]). */
  private extensions = new Map<string, string[]>();
  private ended: SmtpFailure | null = null;
  private endListeners: Array<() => void> = [];
  /** Replies that arrived with nothing waiting (a 421 before the server closes an idle session). */
  private unsolicited: Reply | null = null;

  private constructor(private readonly o: SessionOptions) {}

  /**
   * Connected, greeted, TLS where offered, logged in when the server offers AUTH (null: not
   * logged in, for a readiness probe that only asks whether the server answers).
   */
  static async open(o: SessionOptions, login: Login | null): Promise<SubmissionSession> {
    const s = new SubmissionSession(o);
    try {
      await s.start(login);
    } catch (err) {
      s.close();
      throw err;
    }
    return s;
  }

  /** The session is over (closed by either side, or failed): never to be used again. */
  get dead(): boolean {
    return this.ended !== null || this.unsolicited !== null;
  }

  /** Called once when the session ends for any reason. */
  onEnd(listener: () => void): void {
    if (this.ended) listener();
    else this.endListeners.push(listener);
  }

  close(): void {
    if (!this.ended && this.socket && !this.socket.destroyed) this.socket.end('QUIT\r\n');
    this.finish(new SmtpFailure('the session was closed', 'connection'));
    this.socket?.destroy();
  }

  /**
   * One message: resolves when the server accepted it for at least one recipient; rejects with
   * an SmtpFailure carrying the refusing reply. After a failure the session should be closed: its
   * state is not worth restoring with RSET.
   *
   * With PIPELINING the next message may be sent as soon as this one's bytes are written, before
   * its final reply: `written` is called then, and answers whether a next message is about to
   * follow at once. Its envelope then goes out in the same write as this message's final dot
   * (RFC 2920 allows the next MAIL after the end of data), and the server answers both in one
   * write too. A message's bytes go out only after every message before it on the session was
   * accepted, so one refused or lost does not take the next one's bytes with it.
   *
   * `writing`, when given, is called once the message's body is written and awaited before its
   * end (the final dot): the caller records that the message may be taken from then on. Until
   * the final dot is written the server cannot have taken the message (RFC 5321 4.1.1.4: it
   * takes responsibility only once it has the end of the data), so nothing before needs a record.
   */
  async send(env: Envelope, pieces: readonly Buffer[], written?: () => boolean, writing?: () => Promise<void>): Promise<Delivered> {
    const tx = { bodyWritten: false };
    try {
      return await this.transaction(env, pieces, tx, written, writing);
    } catch (err) {
      if (err instanceof SmtpFailure && err.stage === 'connection') {
        // Postfix cannot have taken a message whose final dot it never got: sending it again
        // elsewhere cannot deliver it twice. One whose final dot went and whose reply did not
        // come, it has most likely queued (it answers once the message is safe in its queue).
        if (!tx.bodyWritten) throw new SmtpFailure(err.message, err.stage, err.replyCode, err.reply, true);
        if (err.replyCode === undefined) throw new SmtpFailure(err.message, err.stage, undefined, undefined, false, true);
      }
      throw err;
    }
  }

  private async transaction(
    env: Envelope,
    pieces: readonly Buffer[],
    tx: { bodyWritten: boolean },
    written?: () => boolean,
    writing?: () => Promise<void>,
  ): Promise<Delivered> {
    if (this.dead) throw new SmtpFailure('the session has ended', 'connection');
    const size = pieces.reduce((n, p) => n + p.length, 0);
    const commands = [this.mailFrom(env, size), ...env.to.map((to) => this.rcptTo(to, env))];
    const before = this.lastFinal;
    if (this.extensions.has('PIPELINING')) {
      const replies = commands.map(() => this.next());
      const data = this.next();
      this.socket.write(`${commands.join('\r\n')}\r\nDATA\r\n`);
      const final = this.afterData(data, pieces, tx, before, written, writing);
      this.lastFinal = final;
      return this.outcome(env, replies, final);
    }
    const replies: Reply[] = [];
    for (const command of commands) {
      const r = await this.command(command);
      replies.push(r);
      // MAIL refused: nothing after it would be taken.
      if (replies.length === 1 && r.code >= 400)
        return this.outcome(
          env,
          replies.map((x) => Promise.resolve(x)),
          Promise.resolve(r),
        );
    }
    return this.outcome(
      env,
      replies.map((x) => Promise.resolve(x)),
      this.afterData(this.command('DATA'), pieces, tx, null, undefined, writing),
    );
  }

  /** The previous message's final reply, while messages are pipelined one after another. */
  private lastFinal: Promise<Reply> | null = null;

  /**
   * After DATA's 354 (and the previous message's acceptance), the message dot-stuffed, then (once
   * `writing` recorded it) its ending; the reply to that.
   */
  private async afterData(
    data: Promise<Reply>,
    pieces: readonly Buffer[],
    tx: { bodyWritten: boolean },
    before: Promise<Reply> | null,
    written?: () => boolean,
    writing?: () => Promise<void>,
  ): Promise<Reply> {
    const r = await data;
    if (r.code !== 354) return r;
    // Replies come in order: the one before this 354 has come already.
    const previous = before ? await before.catch(() => null) : null;
    if (before && (previous === null || previous.code >= 400)) {
      throw new SmtpFailure('the message before this one on the session failed', 'connection');
    }
    if (this.ended) throw this.ended;
    const final = this.next();
    this.socket.cork();
    let last = 0x0a;
    for (const piece of pieces) {
      if (piece.length === 0) continue;
      let from = 0;
      // A line starting with "." gets one more (RFC 5321 4.5.2), found without copying the piece.
      for (let at = last === 0x0a && piece[0] === 0x2e ? 0 : piece.indexOf('\n.'); at !== -1; at = piece.indexOf('\n.', at + 1)) {
        const dot = piece[at] === 0x2e ? at : at + 1;
        this.socket.write(piece.subarray(from, dot));
        this.socket.write(DOT);
        from = dot;
      }
      this.socket.write(from === 0 ? piece : piece.subarray(from));
      last = piece[piece.length - 1]!;
    }
    if (last !== 0x0a) this.socket.write(CRLF);
    if (writing) {
      // Not the final dot before the caller's record that the message may be taken: the body
      // leaves meanwhile. Without that record the message cannot go (the session, left in DATA,
      // is closed by the caller; the server drops a message whose end never came).
      this.socket.uncork();
      const unrecorded = await writing().then(
        () => null,
        (err: unknown) => err ?? new Error('failed'),
      );
      if (unrecorded)
        throw new SmtpFailure(
          `could not record the send before ending it: ${unrecorded instanceof Error ? unrecorded.message : String(unrecorded)}`,
          'connection',
        );
      // The session may have ended while the record was made (read again: not the value checked above).
      const ended = this.ended as SmtpFailure | null;
      if (ended) throw ended;
      this.socket.cork();
    }
    this.socket.write(END);
    tx.bodyWritten = true;
    // A next message coming at once writes its envelope before the uncork (its path is promise
    // continuations, which all run before an immediate), so both leave in one write.
    if (written?.()) setImmediate(() => this.socket.uncork());
    else process.nextTick(() => this.socket.uncork());
    return final;
  }

  /** The replies of one transaction read in order, as one outcome. */
  private async outcome(env: Envelope, replies: Array<Promise<Reply>>, final: Promise<Reply>): Promise<Delivered> {
    // Every reply is awaited before judging, so none is left unhandled when an early one fails.
    const settled = await Promise.allSettled([...replies, final]);
    const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
    if (failed) throw failed.reason;
    const [mail, ...rest] = settled.map((s) => (s as PromiseFulfilledResult<Reply>).value);
    const last = rest.pop()!;
    // 421 to MAIL: the server was closing the session (an idle timeout) and took none of it.
    if (mail!.code === 421) throw new SmtpFailure(mail!.text, 'connection', 421, mail!.text);
    if (mail!.code >= 400) throw this.refused(mail!);
    const rejected: Delivered['rejected'] = [];
    rest.forEach((r, i) => {
      if (r.code >= 400) rejected.push({ recipient: env.to[i]!, reply: r.text });
    });
    if (rejected.length === env.to.length) {
      const first = rest.find((r) => r.code >= 400)!;
      throw this.refused(first);
    }
    if (last.code >= 400 || last.code < 200) throw this.refused(last);
    return { reply: last.text, rejected };
  }

  private refused(r: Reply): SmtpFailure {
    return new SmtpFailure(r.text, 'transaction', r.code, r.text);
  }

  private mailFrom(env: Envelope, size: number): string {
    let cmd = `MAIL FROM:<${env.from}>`;
    if (this.extensions.has('SIZE')) cmd += ` SIZE=${size}`;
    if (this.extensions.has('SMTPUTF8') && ![env.from, ...env.to].every(isAscii)) cmd += ' SMTPUTF8';
    if (env.dsn && this.extensions.has('DSN')) cmd += ` RET=${env.dsn.ret} ENVID=${xtext(env.dsn.envid)}`;
    return cmd;
  }

  private rcptTo(to: string, env: Envelope): string {
    let cmd = `RCPT TO:<${to}>`;
    if (env.dsn && this.extensions.has('DSN') && env.dsn.notify.length > 0) cmd += ` NOTIFY=${env.dsn.notify.join(',')}`;
    return cmd;
  }

  /** NOOP: the server still answers this session (readiness). */
  async noop(): Promise<void> {
    expect(await this.command('NOOP'), 250, 'connection');
  }

  private async start(login: Login | null): Promise<void> {
    const raw = this.o.secure
      ? tlsConnect({ host: this.o.host, port: this.o.port, servername: isIp(this.o.host) ? undefined : this.o.host })
      : netConnect({ host: this.o.host, port: this.o.port });
    const connected = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new SmtpFailure(`no connection to ${this.o.host}:${this.o.port} within ${this.o.timeoutMs} ms`, 'connection')),
        this.o.timeoutMs,
      );
      raw.once(this.o.secure ? 'secureConnect' : 'connect', () => {
        clearTimeout(timer);
        resolve();
      });
      raw.once('error', (err) => {
        clearTimeout(timer);
        reject(new SmtpFailure(`${(err as NodeJS.ErrnoException).code ?? 'ERROR'}: ${err.message}`, 'connection'));
      });
    });
    this.attach(raw);
    const greeting = this.next();
    await connected;
    expect(await greeting, 220, 'connection');
    await this.ehlo();
    if (!this.o.secure && this.extensions.has('STARTTLS')) {
      expect(await this.command('STARTTLS'), 220, 'connection');
      await this.upgrade();
      await this.ehlo();
    }
    const methods = this.extensions.get('AUTH');
    if (!login) return;
    if (methods && !methods.includes('PLAIN') && methods.includes('LOGIN')) {
      expect(await this.command('AUTH LOGIN'), 334, 'login');
      expect(await this.command(Buffer.from(login.user).toString('base64')), 334, 'login');
      expect(await this.command(Buffer.from(login.pass).toString('base64')), 235, 'login');
    } else if (methods) {
      expect(await this.command(`AUTH PLAIN ${Buffer.from(`\0${login.user}\0${login.pass}`).toString('base64')}`), 235, 'login');
    }
  }

  private async ehlo(): Promise<void> {
    const r = expect(await this.command(`EHLO ${this.o.name ?? 'postern'}`), 250, 'connection');
    this.extensions = new Map(
      r.text
        .split('\n')
        .slice(1)
        .map((line) => {
          const [keyword, ...params] = line.slice(4).trim().toUpperCase().split(/\s+/);
          return [keyword!, params];
        }),
    );
  }

  private command(line: string): Promise<Reply> {
    const r = this.next();
    this.socket.write(`${line}\r\n`);
    return r;
  }

  /** The next reply the server sends. */
  private next(): Promise<Reply> {
    if (this.ended) return Promise.reject(this.ended);
    if (this.unsolicited)
      return Promise.reject(new SmtpFailure(this.unsolicited.text, 'connection', this.unsolicited.code, this.unsolicited.text));
    return new Promise((resolve, reject) => this.waiting.push({ resolve, reject }));
  }

  private attach(socket: Socket | TLSSocket): void {
    this.socket = socket;
    socket.setNoDelay(true);
    socket.setTimeout(this.o.timeoutMs);
    socket.on('data', this.onData);
    socket.on('timeout', this.onTimeout);
    socket.on('error', this.onError);
    socket.on('close', this.onClose);
  }

  private detach(socket: Socket | TLSSocket): void {
    socket.off('data', this.onData);
    socket.off('timeout', this.onTimeout);
    socket.off('error', this.onError);
    socket.off('close', this.onClose);
  }

  private async upgrade(): Promise<void> {
    const plain = this.socket;
    this.detach(plain);
    const secured = tlsConnect({ socket: plain, servername: isIp(this.o.host) ? undefined : this.o.host });
    await new Promise<void>((resolve, reject) => {
      secured.once('secureConnect', resolve);
      secured.once('error', (err) => reject(new SmtpFailure(`TLS: ${err.message}`, 'connection')));
    });
    this.attach(secured);
  }

  private readonly onData = (chunk: Buffer): void => {
    const text = this.partial + this.decoder.write(chunk);
    const parts = text.split('\n');
    this.partial = parts.pop()!;
    for (const part of parts) {
      const line = part.endsWith('\r') ? part.slice(0, -1) : part;
      this.lines.push(line);
      // "250-…" continues the reply; "250 …" (or a bare "250") ends it.
      if (line.length > 3 && line[3] === '-') continue;
      const reply: Reply = { code: Number(line.slice(0, 3)) || 0, text: this.lines.join('\n') };
      this.lines = [];
      const waiter = this.waiting.shift();
      if (waiter) waiter.resolve(reply);
      else this.unsolicited ??= reply;
    }
  };

  private readonly onTimeout = (): void => {
    // Idle in the pool is fine (the pool closes idle sessions); waiting for an answer is not.
    if (this.waiting.length === 0) return;
    this.finish(new SmtpFailure(`no reply within ${this.o.timeoutMs} ms`, 'connection'));
    this.socket.destroy();
  };

  private readonly onError = (err: Error): void => {
    this.finish(new SmtpFailure(`${(err as NodeJS.ErrnoException).code ?? 'ERROR'}: ${err.message}`, 'connection'));
  };

  private readonly onClose = (): void => {
    const said = this.unsolicited;
    this.finish(
      said
        ? new SmtpFailure(said.text, 'connection', said.code, said.text)
        : new SmtpFailure('the connection closed unexpectedly', 'connection'),
    );
  };

  private finish(failure: SmtpFailure): void {
    if (this.ended) return;
    this.ended = failure;
    for (const w of this.waiting.splice(0)) w.reject(failure);
    for (const l of this.endListeners.splice(0)) l();
  }
}

function expect(r: Reply, code: number, stage: SmtpFailure['stage']): Reply {
  if (r.code !== code) throw new SmtpFailure(r.text, stage, r.code, r.text);
  return r;
}

function isAscii(s: string): boolean {
  return !/[^\x00-\x7f]/.test(s);
}

function isIp(host: string): boolean {
  return /^[\d.]+$/.test(host) || host.includes(':');
}

/** RFC 3461's xtext: "+", "=" and anything outside printable ASCII as +XX. */
function xtext(s: string): string {
  return s.replace(/[^\x21-\x2a\x2c-\x3c\x3e-\x7e]/g, (c) => `+${c.charCodeAt(0).toString(16).toUpperCase().padStart(2, '0')}`);
}
