// The internal listener Dovecot's push script posts hints to (docker/dovecot/postern-push.lua):
// `POST /hints` with `Authorization: Bearer <POSTERN_HINT_SECRET>` and a JSON body
// `{"user": "<IMAP user>", "mailboxes": ["INBOX", ...]}`. Not the public API: its own address
// (POSTERN_HINT_LISTEN, keep it on a private network) and its own secret. Answers 204 at once; the
// sync the hint asks for runs after. Every refusal is a 4xx `{ "error": ... }` like the API's.
import { timingSafeEqual, createHash } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { WarnLog } from '../../lib/warn-log.ts';

export interface HintListenerOptions {
  host: string;
  port: number;
  secret: string;
  /** A hint for this IMAP user; resolves false when Postern has no inbox for it. */
  onHint: (imapUser: string) => Promise<boolean>;
  /** A post with no valid secret: Dovecot's script may be set up with another one. */
  onRefused?: () => void;
  log: WarnLog;
}

/** A hint is a user name and a few mailbox names; anything bigger is not one. */
const MAX_BODY = 64 * 1024;

const digest = (s: string) => createHash('sha256').update(s).digest();

export class HintListener {
  private server: Server | null = null;
  private readonly secretDigest: Buffer;

  constructor(private readonly o: HintListenerOptions) {
    this.secretDigest = digest(o.secret);
  }

  async listen(): Promise<{ host: string; port: number }> {
    const server = createServer((req, res) => void this.handle(req, res));
    // Dovecot's client waits for the answer: never hold a connection long.
    server.requestTimeout = 10_000;
    server.headersTimeout = 5_000;
    server.listen(this.o.port, this.o.host);
    await once(server, 'listening');
    this.server = server;
    const { port } = server.address() as AddressInfo;
    return { host: this.o.host, port };
  }

  async close(): Promise<void> {
    const server = this.server;
    if (!server) return;
    this.server = null;
    const closed = once(server, 'close');
    server.close();
    server.closeAllConnections();
    await closed;
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const answer = (status: number, error?: string) => {
      if (res.headersSent) return;
      if (error === undefined) {
        res.writeHead(status).end();
        return;
      }
      res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify({ error }));
    };
    try {
      if (req.url !== '/hints') return answer(404, 'not found');
      if (req.method !== 'POST') return answer(405, 'method not allowed: POST a hint');
      const auth = req.headers.authorization ?? '';
      const presented = /^Bearer (.+)$/.exec(auth)?.[1] ?? '';
      // Compared as digests: equal lengths for timingSafeEqual, and no timing hint of the length.
      if (!timingSafeEqual(digest(presented), this.secretDigest)) {
        this.o.onRefused?.();
        return answer(401, 'a valid hint secret is required');
      }
      const chunks: Buffer[] = [];
      let size = 0;
      for await (const chunk of req as AsyncIterable<Buffer>) {
        size += chunk.length;
        if (size > MAX_BODY) return answer(413, 'a hint is at most 64 KiB');
        chunks.push(chunk);
      }
      let body: unknown;
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch {
        return answer(400, 'the body must be JSON: {"user": "...", "mailboxes": [...]}');
      }
      const user = typeof body === 'object' && body !== null ? (body as { user?: unknown }).user : undefined;
      if (typeof user !== 'string' || user === '' || user.length > 320) return answer(400, 'user must be the IMAP user name');
      // An unknown user is not an error for Dovecot to log on every change: other services'
      // users share the server. It is counted and answered 204 all the same.
      await this.o.onHint(user);
      answer(204);
    } catch (err) {
      this.o.log.warn({ err }, 'a push hint failed');
      answer(503, 'the hint could not be taken; the sweep will find the change');
    }
  }
}
