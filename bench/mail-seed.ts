// Fills a mailbox fast for the benchmarks: MULTIAPPEND (RFC 3502) with LITERAL+ over a raw
// socket, 500 messages per command, one transaction each in Dovecot.
import * as net from 'node:net';

export interface SeedTarget {
  host: string;
  port: number;
  /** LOGIN name: the user, or user*master. */
  login: string;
  password: string;
}

function message(i: number, mailbox: string): Buffer {
  const date = new Date(Date.UTC(2024, 0, 1) + i * 60_000).toUTCString();
  return Buffer.from(
    [
      `From: Sender ${i % 97} <sender${i % 97}@example.org>`,
      'To: Someone <someone@postern.test>',
      `Subject: ${mailbox} message ${i} about topic ${i % 13}`,
      `Date: ${date}`,
      `Message-ID: <seed.${mailbox}.${i}.${Date.now()}@example.org>`,
      'MIME-Version: 1.0',
      'Content-Type: text/plain; charset=utf-8',
      '',
      `Body of message ${i}. `.repeat(8 + (i % 20)),
      '',
    ].join('\r\n'),
  );
}

export async function seedMailbox(t: SeedTarget, mailbox: string, count: number, perCommand = 500): Promise<void> {
  const socket = net.connect({ host: t.host, port: t.port });
  socket.setNoDelay(true);
  let buffer = '';
  let waiting: { tag: string; resolve: () => void; reject: (e: Error) => void } | null = null;
  socket.on('data', (chunk: Buffer) => {
    buffer += chunk.toString('latin1');
    let i: number;
    while ((i = buffer.indexOf('\r\n')) >= 0) {
      const line = buffer.slice(0, i);
      buffer = buffer.slice(i + 2);
      if (waiting && line.startsWith(`${waiting.tag} `)) {
        const w = waiting;
        waiting = null;
        if (/^\S+ OK/.test(line)) w.resolve();
        else w.reject(new Error(line));
      }
    }
  });
  const send = (tag: string, data: Buffer | string) =>
    new Promise<void>((resolve, reject) => {
      waiting = { tag, resolve, reject };
      socket.write(data);
    });
  await new Promise<void>((resolve, reject) => {
    socket.once('data', () => resolve());
    socket.once('error', reject);
  });
  await send('L', `L LOGIN "${t.login}" "${t.password}"\r\n`);
  await send('C', `C CREATE "${mailbox}"\r\n`).catch(() => undefined);
  for (let start = 0, n = 0; start < count; start += perCommand, n++) {
    const parts: Buffer[] = [Buffer.from(`A${n} APPEND "${mailbox}"`)];
    for (let i = start; i < Math.min(count, start + perCommand); i++) {
      const m = message(i, mailbox);
      parts.push(Buffer.from(` (${i % 3 === 0 ? '' : '\\Seen'}) {${m.length}+}\r\n`), m);
    }
    parts.push(Buffer.from('\r\n'));
    await send(`A${n}`, Buffer.concat(parts));
  }
  await send('Z', 'Z LOGOUT\r\n').catch(() => undefined);
  socket.destroy();
}
