// A real HTTP receiver for webhook tests: every request is checked with `standardwebhooks` (the
// reference verifier, not Postern's code) against the secrets it is given, and kept; what it
// answers is up to the test (a status, Retry-After, or no answer at all).
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook as Verifier } from 'standardwebhooks';

export interface Received {
  id: string;
  timestamp: number;
  signature: string;
  body: string;
  type: string;
  data: Record<string, unknown> & { id?: string; cursor?: string };
  /** Which of the receiver's secrets verified it (indexes into `secrets`). */
  verifiedWith: number[];
  at: number;
}

/**
 * What to answer: a status (with headers; after `delayMs`, a slow receiver), or 'hang' (never
 * answer; the sender times out).
 */
export type Answer = { status: number; headers?: Record<string, string>; delayMs?: number } | 'hang';

export class Receiver {
  readonly received: Received[] = [];
  /** Requests that failed verification with every secret (should stay empty). */
  readonly unverified: string[] = [];
  secrets: string[] = [];
  answer: (r: Received) => Answer = () => ({ status: 204 });
  private readonly hanging = new Set<ServerResponse>();
  /** Requests whose sender closed the connection before it was answered. */
  cutShort = 0;
  private server: Server | null = null;
  url = '';

  async start(path = '/hook'): Promise<this> {
    this.server = createServer((req, res) => void this.handle(req, res));
    this.server.listen(0, '127.0.0.1');
    await once(this.server, 'listening');
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}${path}`;
    return this;
  }

  /** Requests held open now (answer 'hang'). */
  get hangingCount(): number {
    return this.hanging.size;
  }

  ids(): string[] {
    return this.received.map((r) => r.id);
  }

  /** Distinct event ids answered 2xx so far. */
  delivered = new Set<string>();

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = Buffer.concat(chunks).toString('utf8');
    const headers = {
      'webhook-id': String(req.headers['webhook-id'] ?? ''),
      'webhook-timestamp': String(req.headers['webhook-timestamp'] ?? ''),
      'webhook-signature': String(req.headers['webhook-signature'] ?? ''),
    };
    const verifiedWith: number[] = [];
    this.secrets.forEach((secret, i) => {
      try {
        new Verifier(secret).verify(body, headers);
        verifiedWith.push(i);
      } catch {
        // not this one
      }
    });
    if (verifiedWith.length === 0) this.unverified.push(headers['webhook-id']);
    let parsed: { type?: string; data?: Record<string, unknown> } = {};
    try {
      parsed = JSON.parse(body) as typeof parsed;
    } catch {
      // kept as is; the test's assertions report it
    }
    const r: Received = {
      id: headers['webhook-id'],
      timestamp: Number(headers['webhook-timestamp']),
      signature: headers['webhook-signature'],
      body,
      type: parsed.type ?? '',
      data: parsed.data ?? {},
      verifiedWith,
      at: Date.now(),
    };
    this.received.push(r);
    const answer = this.answer(r);
    if (answer === 'hang' || answer.delayMs) {
      this.hanging.add(res);
      res.on('close', () => {
        this.hanging.delete(res);
        if (!res.writableEnded) this.cutShort++;
      });
      if (answer === 'hang') return;
      await new Promise((resolve) => setTimeout(resolve, answer.delayMs));
      if (!this.hanging.has(res)) return;
      this.hanging.delete(res);
    }
    if (answer.status >= 200 && answer.status < 300) this.delivered.add(r.id);
    res.writeHead(answer.status, answer.headers ?? {});
    res.end();
  }

  async close(): Promise<void> {
    for (const res of this.hanging) res.destroy();
    if (!this.server) return;
    this.server.closeAllConnections();
    this.server.close();
    await once(this.server, 'close');
  }
}
