// Readiness probes: a service is up when each of its ports answers with the expected greeting.
import * as net from 'node:net';
import { HOST } from './ports.ts';

export interface Probe {
  /** What speaks on the port, for messages: "IMAP", "SMTP"... */
  what: string;
  port: number;
  /** How the first line of the answer starts. */
  expect: string;
  /** Sent on connect, for protocols where the client speaks first. */
  send?: string;
  /** Sent before disconnecting, so that the server logs an orderly goodbye. */
  quit: string;
  /** A binary protocol: the answer is `expect`'s bytes, not a line (`send` is written as latin1). */
  binary?: boolean;
}

/**
 * Connects, reads the greeting (after sending `send`, if given) and checks how it starts; then
 * says goodbye (`quit`) so that the server logs an orderly disconnect.
 */
export function probeOnce(probe: Probe): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: HOST, port: probe.port });
    let buf = '';
    let settled = false;
    const done = (err?: Error): void => {
      if (settled) return;
      settled = true;
      if (err) {
        socket.destroy();
        reject(err);
      } else {
        socket.end(probe.quit);
        socket.on('error', () => undefined);
        socket.setTimeout(1000, () => socket.destroy());
        resolve();
      }
    };
    socket.setTimeout(2000, () => done(new Error('no greeting within 2 s')));
    socket.on('error', (e) => done(e));
    socket.on('connect', () => {
      if (probe.send) socket.write(probe.send, 'latin1');
    });
    socket.on('data', (b: Buffer) => {
      buf += b.toString('latin1');
      if (probe.binary ? buf.length < probe.expect.length : !buf.includes('\n')) return;
      if (buf.startsWith(probe.expect)) done();
      else done(new Error(`unexpected greeting ${JSON.stringify(buf.split('\r\n')[0])}`));
    });
    socket.on('end', () => done(new Error(`connection closed after ${JSON.stringify(buf)}`)));
  });
}

/** Whether anything accepts connections on the port. */
export function portOpen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: HOST, port });
    socket.setTimeout(1000, () => {
      socket.destroy();
      resolve(true);
    });
    socket.on('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.on('error', () => resolve(false));
  });
}
