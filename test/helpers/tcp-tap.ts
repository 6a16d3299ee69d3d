// A TCP relay in front of a real server (Dovecot, Postfix) that a test can watch and cut: every
// chunk passes through `onClient`/`onServer`, which forward it, hold it back, or end the
// connection at a chosen moment (after the server saved something, before its answer).
import { connect, createServer, type Server, type Socket } from 'node:net';

export interface TapConnection {
  /** Towards the server / the client. */
  toServer(chunk: Buffer, then?: () => void): void;
  toClient(chunk: Buffer): void;
  /** Ends both sides at once. */
  drop(): void;
}

export interface TapHooks {
  /** A chunk the client sent; forwards it unless told otherwise. */
  onClient?(chunk: Buffer, conn: TapConnection): 'forward' | 'handled';
  /** A chunk the server sent; forwards it unless told otherwise. */
  onServer?(chunk: Buffer, conn: TapConnection): 'forward' | 'handled';
}

export class TcpTap {
  private server: Server | null = null;
  private readonly sockets = new Set<Socket>();

  constructor(
    private readonly upstream: { host: string; port: number },
    private readonly hooks: TapHooks,
  ) {}

  /** Listens on a free port of 127.0.0.1; resolves with it. */
  async start(): Promise<number> {
    this.server = createServer((client) => {
      const upstream = connect(this.upstream.port, this.upstream.host);
      this.sockets.add(client).add(upstream);
      const conn: TapConnection = {
        toServer: (chunk, then) => upstream.write(chunk, then),
        toClient: (chunk) => client.write(chunk),
        drop: () => {
          client.destroy();
          upstream.destroy();
        },
      };
      client.on('close', conn.drop).on('error', conn.drop);
      upstream.on('close', conn.drop).on('error', conn.drop);
      client.on('data', (chunk: Buffer) => {
        if ((this.hooks.onClient?.(chunk, conn) ?? 'forward') === 'forward') upstream.write(chunk);
      });
      upstream.on('data', (chunk: Buffer) => {
        if ((this.hooks.onServer?.(chunk, conn) ?? 'forward') === 'forward') client.write(chunk);
      });
    });
    await new Promise<void>((r) => this.server!.listen(0, '127.0.0.1', r));
    return (this.server.address() as { port: number }).port;
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((r) => (this.server ? this.server.close(() => r()) : r()));
  }
}
