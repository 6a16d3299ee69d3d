// Postern's LMTP ingress: the listener Postfix delivers to instead of Dovecot (Postfix → Postern
// LMTP → Dovecot LMTP). smtp-server speaks LMTP; lib/mail/ingress.ts decides what each recipient
// gets, and each recipient gets its own reply after DATA, as LMTP requires.
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { SMTPServer, type SMTPServerDataStream } from 'smtp-server';
import type { DeliveryOutcome, Ingress } from '../../lib/mail/ingress.ts';
import type { WarnLog } from '../../lib/warn-log.ts';

/**
 * Largest message taken, in bytes: above Postfix's message_size_limit in the bundled config
 * (50 MB), so Postfix refuses first. A message is held in memory while it is sealed and handed
 * on, so this also bounds what one delivery costs.
 */
export const MAX_MESSAGE_BYTES = 64 * 1024 * 1024;
/**
 * Concurrent LMTP connections: with the size bound, what deliveries can hold in memory. Postfix's
 * lmtp_destination_concurrency_limit must not exceed it (docker/postfix/main.cf): a connection
 * past it is refused with 421 and its message waits for the next queue run.
 */
const MAX_CLIENTS = 16;

export interface LmtpIngressOptions {
  host: string;
  port: number;
  log: WarnLog;
}

/** An Error smtp-server turns into that reply for one recipient. */
function reply(outcome: DeliveryOutcome): Error | string {
  if (outcome.ok) return '2.0.0 delivered';
  const err = new Error(outcome.reply) as Error & { responseCode: number };
  err.responseCode = outcome.code;
  return err;
}

export class LmtpIngress {
  private readonly server: SMTPServer;

  constructor(
    private readonly ingress: Ingress,
    private readonly options: LmtpIngressOptions,
  ) {
    this.server = new SMTPServer({
      lmtp: true,
      name: 'postern',
      banner: 'Postern delivery ingress',
      // Postfix on a trusted network; no AUTH or TLS on this hop (bind it to loopback or a
      // private network).
      disabledCommands: ['AUTH', 'STARTTLS'],
      authOptional: true,
      hideSTARTTLS: true,
      size: MAX_MESSAGE_BYTES,
      maxClients: MAX_CLIENTS,
      logger: false,
      // Postfix on a known address: a reverse DNS lookup per connection only costs time.
      disableReverseLookup: true,
      // On close, a delivery under way gets this long to finish; Postfix retries one cut short.
      closeTimeout: 10_000,
      onData: (stream, session, callback) => {
        this.onData(stream, session.envelope.mailFrom, session.envelope.rcptTo).then(
          (replies) => (callback as unknown as (err: null, replies: Array<Error | string>) => void)(null, replies),
          (err: unknown) => {
            options.log.warn({ err }, 'LMTP delivery failed; Postfix will retry');
            const e = new Error('4.3.0 temporary failure, try again later') as Error & { responseCode: number };
            e.responseCode = 451;
            callback(e);
          },
        );
      },
    });
    this.server.on('error', (err) => options.log.warn({ err }, 'LMTP ingress error'));
  }

  private async onData(
    stream: SMTPServerDataStream,
    mailFrom: false | { address: string },
    rcptTo: ReadonlyArray<{ address: string }>,
  ): Promise<Array<Error | string>> {
    const chunks: Buffer[] = [];
    for await (const chunk of stream) {
      // Past the limit the rest is read and dropped; smtp-server answers 552 for each recipient.
      if (!stream.sizeExceeded) chunks.push(chunk as Buffer);
    }
    if (stream.sizeExceeded) return [];
    const outcomes = await this.ingress.receive(
      { from: mailFrom ? mailFrom.address : '', to: rcptTo.map((r) => r.address) },
      Buffer.concat(chunks),
    );
    return outcomes.map(reply);
  }

  /** The bound port, once listening. */
  port = 0;

  /** Starts listening; resolves with the bound port, rejects when the port is taken. */
  async listen(): Promise<number> {
    const failed = once(this.server, 'error').then(([err]) => Promise.reject(err as Error));
    this.server.listen(this.options.port, this.options.host);
    await Promise.race([once(this.server.server, 'listening'), failed]);
    failed.catch(() => undefined);
    this.port = (this.server.server.address() as AddressInfo).port;
    return this.port;
  }

  async close(): Promise<void> {
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
