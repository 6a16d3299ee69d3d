// The relay's own connection pool (adapters/smtp/relay.ts), against an smtp-server standing in
// for submission: what Postfix cannot be made to do on cue (close idle sessions now, count
// connections). What Postfix answers and how it is mapped is test/send/send.test.ts's, against Postfix.
import type { AddressInfo, Server as NetServer, Socket } from 'node:net';
import { expect } from 'chai';
import { pino } from 'pino';
import { SMTPServer } from 'smtp-server';
import { SmtpRelay } from '../../adapters/smtp/relay.ts';
import { RelayOutcomeUnknown, RelayRefused } from '../../lib/send/ports.ts';

interface Stand {
  port: number;
  logins: string[];
  connections: Set<Socket>;
  /** Most sessions open at once. */
  peak: number;
  messages: Buffer[];
  /** Chunks in which a message's final dot and the next MAIL FROM arrived together. */
  pipelined: number;
  /** Everything the clients wrote, in order of arrival. */
  wire: string;
  close(): Promise<void>;
}

async function stand(): Promise<Stand> {
  const s: Stand = { port: 0, logins: [], connections: new Set(), peak: 0, messages: [], pipelined: 0, wire: '', close: async () => {} };
  const server = new SMTPServer({
    authOptional: false,
    allowInsecureAuth: true,
    disabledCommands: ['STARTTLS'],
    hideDSN: false,
    logger: false,
    onAuth(auth, _session, cb) {
      s.logins.push(auth.username ?? '');
      cb(null, { user: auth.username });
    },
    onRcptTo(address, _session, cb) {
      if (address.address.startsWith('refused')) return cb(Object.assign(new Error('5.1.1 no such user'), { responseCode: 550 }));
      cb();
    },
    onData(stream, session, cb) {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        const message = Buffer.concat(chunks);
        // A message the server refuses once it has it all (as Postfix does for a milter's no).
        if (message.includes('Subject: refuse-at-dot'))
          return cb(Object.assign(new Error('5.7.1 refused at the end of data'), { responseCode: 554 }));
        s.messages.push(message);
        // Taken, and the connection lost before the reply (a timeout, a network cut).
        if (message.includes('Subject: lose-reply')) {
          for (const socket of s.connections) if (socket.remotePort === session.remotePort) socket.destroy();
          return;
        }
        cb(null, 'Ok: queued');
      });
    },
  });
  // A client that hangs up while the server still writes (the relay closing a session after a
  // refusal) is the server's EPIPE to ignore, as Postfix does.
  server.on('error', () => {});
  const net = (server as unknown as { server: NetServer }).server;
  net.on('connection', (socket: Socket) => {
    s.connections.add(socket);
    s.peak = Math.max(s.peak, s.connections.size);
    socket.on('data', (chunk: Buffer) => {
      if (chunk.includes('\r\n.\r\nMAIL FROM:')) s.pipelined++;
      s.wire += chunk.toString('latin1');
    });
    socket.on('close', () => s.connections.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  s.port = (net.address() as AddressInfo).port;
  s.close = () => new Promise<void>((resolve) => server.close(() => resolve()));
  return s;
}

const raw = (n: number | string) =>
  Buffer.from(`From: <a@x.test>\r\nTo: <b@y.test>\r\nSubject: ${n}\r\n\r\n.dot at the start of a line\r\nbody ${n}\r\n`);

describe('relay: its connection pool', () => {
  let s: Stand;
  let relay: SmtpRelay;

  beforeEach(async () => {
    s = await stand();
    relay = new SmtpRelay(
      {
        host: '127.0.0.1',
        port: s.port,
        secure: false,
        maxPerInbox: 2,
        timeoutMs: 5000,
        masterUser: 'master',
        masterPassword: 'pw',
        masterSeparator: '*',
      },
      pino({ level: 'silent' }),
    );
  });
  afterEach(async () => {
    await relay.close();
    for (const socket of s.connections) socket.destroy();
    await s.close();
  });

  const send = (n: number | string, to = `rcpt-${n}@y.test`) =>
    relay.send({ user: 'u@x.test', from: 'a@x.test', to: [to], raw: [raw(n)], envid: `env${n}` });

  it('sends 20 messages at once over at most maxPerInbox connections, each logged in as user*master, the bytes dot-stuffed', async () => {
    const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => send(i)));
    expect(answers.every((a) => a.rejected.length === 0 && /Ok: queued/.test(a.reply))).to.equal(true);
    expect(s.messages).to.have.length(20);
    expect(s.peak).to.be.at.most(2);
    expect(s.logins).to.have.length.within(1, 2);
    expect(s.logins.every((l) => l === 'u@x.test*master')).to.equal(true);
    // smtp-server undoes the dot-stuffing: what arrives is what was given.
    expect(s.messages.map(String)).to.include(raw(3).toString());
  });

  it("pipelines the next message's envelope behind a message's final dot when sends are waiting", async () => {
    const answers = await Promise.all(Array.from({ length: 30 }, (_, i) => send(i)));
    expect(answers).to.have.length(30);
    expect(s.messages).to.have.length(30);
    expect(s.pipelined).to.be.above(0);
  });

  it("a message refused at the end of data takes none of the next one's bytes: that one goes on another connection, once", async () => {
    const outcomes = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        (i % 5 === 2 ? send('refuse-at-dot') : send(i)).then(
          () => 'sent',
          (err: unknown) => err,
        ),
      ),
    );
    const refused = outcomes.filter((o) => o !== 'sent');
    expect(refused).to.have.length(4);
    for (const err of refused) {
      expect(err).to.be.instanceOf(RelayRefused);
      expect((err as RelayRefused).permanent).to.equal(true);
      expect((err as RelayRefused).reason).to.include('refused at the end of data');
    }
    // Every other message arrived exactly once.
    const subjects = s.messages.map((m) => /Subject: (\S+)/.exec(m.toString())![1]).sort();
    expect(subjects).to.deep.equal(
      Array.from({ length: 20 }, (_, i) => i)
        .filter((i) => i % 5 !== 2)
        .map(String)
        .sort(),
    );
    expect(s.peak).to.be.at.most(2);
  });

  it('sends again on a fresh connection after the server closed its idle ones', async () => {
    await Promise.all([send(1), send(2)]);
    const before = s.logins.length;
    const closed = [...s.connections].map((socket) => new Promise((r) => socket.once('close', r)));
    for (const socket of s.connections) socket.end('421 4.4.2 idle too long\r\n');
    await Promise.all(closed);
    const answers = await Promise.all([send(3), send(4), send(5)]);
    expect(answers).to.have.length(3);
    expect(s.logins.length).to.be.above(before);
    expect(s.messages).to.have.length(5);
  });

  it("a refused message is a permanent RelayRefused in the server's words, and frees its connection", async () => {
    const refused = await send(1, 'refused@y.test').catch((err: unknown) => err);
    expect(refused).to.be.instanceOf(RelayRefused);
    expect((refused as RelayRefused).permanent).to.equal(true);
    expect((refused as RelayRefused).reason).to.include('no such user');
    // Both slots still serve: a leaked one would leave these waiting.
    for (let i = 0; i < 3; i++) await Promise.all([send(10 + i), send(20 + i), send(30 + i, 'refused@y.test').catch(() => null)]);
    expect(s.messages).to.have.length(6);
  });

  it('a reply lost after the final dot is RelayOutcomeUnknown, never sent again, even on a reused connection', async () => {
    await send(1);
    const order: string[] = [];
    const err = await relay
      .send({
        user: 'u@x.test',
        from: 'a@x.test',
        to: ['b@y.test'],
        raw: [raw('lose-reply')],
        envid: 'envl',
        writing: async () => void order.push(`writing with ${s.messages.length} messages in`),
      })
      .catch((e: unknown) => e);
    expect(err).to.be.instanceOf(RelayOutcomeUnknown);
    expect(order).to.deep.equal(['writing with 1 messages in']);
    expect(s.messages.filter((m) => m.includes('Subject: lose-reply'))).to.have.length(1);
    // The next send gets a fresh connection and goes.
    await send(2);
    expect(s.messages).to.have.length(3);
  });

  it('records the send once its body reached the server and before the end of its data: the final dot waits for the record', async () => {
    const seen: string[] = [];
    const delivered = await relay.send({
      user: 'u@x.test',
      from: 'a@x.test',
      to: ['b@y.test'],
      raw: [raw('recorded at the end')],
      envid: 'envr',
      writing: async () => {
        // The body goes ahead of the record; its end does not.
        for (let i = 0; i < 200 && !s.wire.includes('body recorded at the end\r\n'); i++) await new Promise((r) => setTimeout(r, 10));
        seen.push(s.wire.includes('body recorded at the end\r\n') ? 'body arrived' : 'no body');
        seen.push(s.wire.includes('body recorded at the end\r\n.\r\n') ? 'final dot arrived' : 'no final dot');
      },
    });
    expect(seen).to.deep.equal(['body arrived', 'no final dot']);
    expect(delivered.reply).to.include('Ok: queued');
    expect(s.messages.filter((m) => m.includes('Subject: recorded at the end'))).to.have.length(1);
  });

  it('takes no message whose end could not be recorded: a temporary RelayRefused', async () => {
    const err = await relay
      .send({
        user: 'u@x.test',
        from: 'a@x.test',
        to: ['b@y.test'],
        raw: [raw('unrecorded')],
        envid: 'envu',
        writing: () => Promise.reject(new Error('disk full')),
      })
      .catch((e: unknown) => e);
    expect(err).to.be.instanceOf(RelayRefused);
    expect((err as RelayRefused).permanent).to.equal(false);
    expect((err as RelayRefused).reason).to.include('disk full');
    await send(3);
    expect(s.messages.map(String).some((m) => m.includes('unrecorded'))).to.equal(false);
  });

  it('no connection is a temporary RelayRefused', async () => {
    await s.close();
    for (const socket of s.connections) socket.destroy();
    const err = await send(1).catch((e: unknown) => e);
    expect(err).to.be.instanceOf(RelayRefused);
    expect((err as RelayRefused).permanent).to.equal(false);
  });
});
