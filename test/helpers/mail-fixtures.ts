// Shared by the mail tests: a mail app (a separate imapflow client logged in as the inbox's own
// user), test messages, delivery through Postfix, and a small SSE reader.
import { ImapFlow } from 'imapflow';
import nodemailer from 'nodemailer';
import { expect } from 'chai';
import { call, mailEnv, type TestInbox } from './harness.ts';
import { sseBlocks } from './sse-frames.ts';

export async function mailApp(inbox: TestInbox): Promise<ImapFlow> {
  const env = mailEnv();
  const client = new ImapFlow({
    host: env.imap.host,
    port: env.imap.port,
    secure: false,
    auth: { user: inbox.imapUser, pass: inbox.imapPassword },
    logger: false,
    disableAutoIdle: true,
  });
  client.on('error', () => undefined);
  await client.connect();
  return client;
}

let counter = 0;

export function rfc822(options: { subject?: string; from?: string; to?: string; body?: string } = {}): string {
  counter++;
  return [
    `From: ${options.from ?? 'Sender Person <sender@example.org>'}`,
    `To: ${options.to ?? 'someone@postern.test'}`,
    `Subject: ${options.subject ?? `test message ${counter}`}`,
    `Date: ${new Date().toUTCString()}`,
    `Message-ID: <t${Date.now()}.${counter}@example.org>`,
    '',
    options.body ?? `body ${counter}`,
    '',
  ].join('\r\n');
}

/** APPENDs and returns the new UID. */
export async function append(
  client: ImapFlow,
  path: string,
  options: Parameters<typeof rfc822>[0] & { flags?: string[] } = {},
): Promise<number> {
  const res = await client.append(path, rfc822(options), options.flags ?? []);
  if (!res || !res.uid) throw new Error('APPEND gave no UID');
  return res.uid;
}

/** Through Postfix SMTP, so the real delivery path (Postfix → LMTP → Dovecot) is exercised. */
export async function deliver(to: string, options: { subject: string; from?: string }): Promise<void> {
  const env = mailEnv();
  const transport = nodemailer.createTransport({ host: env.smtp.host, port: env.smtp.port, secure: false, ignoreTLS: true });
  try {
    await transport.sendMail({ from: options.from ?? 'sender@example.org', to, subject: options.subject, text: 'delivered' });
  } finally {
    transport.close();
  }
}

export async function until<T>(what: string, probe: () => Promise<T | null | undefined | false>, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

export interface SseEvent {
  event: string;
  data: string;
  at: number;
}

/** Reads an SSE response: events as they come, comments counted, the end noticed. */
export class SseReader {
  readonly events: SseEvent[] = [];
  comments = 0;
  ended = false;
  private waiters: Array<() => void> = [];
  private readonly done: Promise<void>;

  constructor(
    readonly res: Response,
    private readonly abort: AbortController | null = null,
  ) {
    this.done = this.pump();
  }

  /** The client goes away. */
  async close(): Promise<void> {
    this.abort?.abort();
    await this.done;
  }

  private async pump(): Promise<void> {
    try {
      for await (const block of sseBlocks(this.res.body!)) {
        if (block.data !== undefined) this.events.push({ event: block.event ?? 'message', data: block.data, at: Date.now() });
        else if (block.comment) this.comments++;
        for (const w of this.waiters.splice(0)) w();
      }
    } catch {
      // aborted
    }
    this.ended = true;
    for (const w of this.waiters.splice(0)) w();
  }

  /** The first event (from `from` on) matching, within the timeout. */
  async next(match: (e: SseEvent) => boolean, timeoutMs = 10_000, from = 0): Promise<SseEvent> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.events.slice(from).find(match);
      if (found) return found;
      if (this.ended) throw new Error(`stream ended; events: ${JSON.stringify(this.events.map((e) => e.data))}`);
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no matching event; events: ${JSON.stringify(this.events.map((e) => e.data))}`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }

  async closed(): Promise<void> {
    await this.done;
  }
}

export { json } from './harness.ts';

/** The inbox's live stream (GET /inboxes/{inbox}/events) on the instance at `base`, open. */
export async function openInboxStream(base: string, inbox: TestInbox, token: string): Promise<SseReader> {
  const abort = new AbortController();
  const res = await call(`${base}/inboxes/${inbox.id}/events`, { token, headers: { accept: 'text/event-stream' }, signal: abort.signal });
  expect(res.status).to.equal(200);
  return new SseReader(res, abort);
}

/**
 * Holds each answered UID FETCH (the command whose rows a sync diffs against the index) until
 * another one is answered too, or 300 ms pass. Two instances syncing at once have then both
 * computed their diff from the same index before either applies it: the race between processes
 * is made certain instead of merely likely. Returns the undo.
 */
export function holdFetchesInPairs(): () => void {
  type Exec = (this: ImapFlow, command: string, ...rest: unknown[]) => Promise<unknown>;
  const proto = ImapFlow.prototype as unknown as { exec: Exec };
  const original = proto.exec;
  let waiting: (() => void) | null = null;
  proto.exec = async function (command, ...rest) {
    const result = await original.call(this, command, ...rest);
    if (command !== 'UID FETCH') return result;
    if (waiting) {
      waiting();
      return result;
    }
    await new Promise<void>((resolve) => {
      const release = () => {
        clearTimeout(timer);
        if (waiting === release) waiting = null;
        resolve();
      };
      const timer = setTimeout(release, 300);
      waiting = release;
    });
    return result;
  };
  return () => {
    proto.exec = original;
  };
}

/** Fills a mailbox fast with `doveadm import` from an mbox (IMAP APPEND costs ~9 ms a message). */
export async function importMessages(user: string, mailbox: string, count: number): Promise<void> {
  // doveadm reads a file named INBOX as the mbox INBOX and imports nothing from it.
  if (mailbox.toUpperCase() === 'INBOX') throw new Error('importMessages cannot fill INBOX; use another folder');
  const { execFile } = await import('node:child_process');
  const { chmodSync, chownSync, mkdtempSync, rmSync, statSync, writeFileSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { join } = await import('node:path');
  const env = mailEnv();
  const dir = mkdtempSync(join(tmpdir(), 'postern-import-'));
  try {
    let text = '';
    for (let i = 0; i < count; i++) {
      text += `From sender@example.org Mon Jan  1 00:00:00 2024\nFrom: sender@example.org\nSubject: imported ${i}\nMessage-ID: <imp.${i}@example.org>\n\nbody ${i}\n\n`;
    }
    writeFileSync(join(dir, mailbox), text);
    // doveadm reads (and locks) the mbox as the mail user.
    const owner = statSync(join(env.dir, 'mail'));
    chmodSync(dir, 0o755);
    chownSync(dir, owner.uid, owner.gid);
    chownSync(join(dir, mailbox), owner.uid, owner.gid);
    const conf = join(env.dir, 'dovecot', 'dovecot.conf');
    await new Promise<void>((resolve, reject) =>
      execFile(
        'doveadm',
        [
          '-c',
          conf,
          '-o',
          'mail_fsync=never',
          '-o',
          'mail_plugins=',
          'import',
          '-u',
          user,
          `mbox:${dir}:INDEX=MEMORY`,
          '',
          'mailbox',
          mailbox,
          'all',
        ],
        (err) => (err ? reject(err) : resolve()),
      ),
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** One mail-app change and the signatures (`type labelId detail`) it must produce. */
export type MailAppStep = (change: () => Promise<unknown>, wanted: () => string[]) => Promise<void>;

/**
 * What a mail app does to one message, one step at a time: append to INBOX, flag, unflag, flag
 * again (the same flags twice: two changes), move to Archive, delete there. `step` runs each
 * change and waits for what it must produce; returns the message's two UIDs.
 */
export async function mailAppScript(
  app: ImapFlow,
  labels: { INBOX: string; Archive: string },
  step: MailAppStep,
): Promise<{ uid: number; movedUid: number }> {
  const { INBOX, Archive } = labels;
  let uid = 0;
  let movedUid = 0;
  await step(
    async () => (uid = await append(app, 'INBOX', { subject: 'mail app script' })),
    () => [`message.added ${INBOX} ${uid}`],
  );
  await app.mailboxOpen('INBOX');
  await step(
    () => app.messageFlagsAdd(String(uid), ['\\Flagged'], { uid: true }),
    () => [`message.flags ${INBOX} ["flagged"]`],
  );
  await step(
    () => app.messageFlagsRemove(String(uid), ['\\Flagged'], { uid: true }),
    () => [`message.flags ${INBOX} []`],
  );
  await step(
    () => app.messageFlagsAdd(String(uid), ['\\Flagged'], { uid: true }),
    () => [`message.flags ${INBOX} ["flagged"]`],
  );
  await step(
    async () => {
      const moved = await app.messageMove(String(uid), 'Archive', { uid: true });
      movedUid = moved && moved.uidMap ? moved.uidMap.get(uid)! : 0;
    },
    () => [`message.added ${Archive} ${movedUid}`, `message.removed ${INBOX} ""`],
  );
  await app.mailboxOpen('Archive');
  await step(
    () => app.messageDelete(String(movedUid), { uid: true }),
    () => [`message.removed ${Archive} ""`],
  );
  return { uid, movedUid };
}
