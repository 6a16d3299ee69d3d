/**
 * Every port of the environment, as an offset from the env's base port. Adding a port is one row
 * here; the service that listens on it names it in its probes and its config template.
 */
export const HOST = '127.0.0.1';

export const PORT_OFFSETS = {
  lmtp: 24,
  smtp: 25,
  sink: 26,
  // Postern's LMTP ingress: nothing in the env listens here; a Postern started with
  // POSTERN_LMTP_PORT set to it does. Postfix delivers INGRESS_DOMAIN here.
  ingress: 27,
  imap: 43,
  redis: 79,
  /** The private PostgreSQL cluster (never 5432: a system cluster may be there). */
  postgres: 32,
  /** Postfix submission (SASL through Dovecot): where Postern and mail apps send. */
  submission: 87,
  /** Dovecot's auth service for Postfix's SASL. */
  sasl: 88,
  /** Not the env's: where the env's Dovecot sends push hints, for a Postern started with POSTERN_HINT_LISTEN there. */
  hints: 80,
} as const;

export type PortName = keyof typeof PORT_OFFSETS;
export type Ports = Record<PortName, number>;

/** The highest offset: a base port must leave room for it below 65536. */
export const MAX_PORT_OFFSET = 100;

export function ports(basePort: number): Ports {
  const out = {} as Ports;
  for (const [name, offset] of Object.entries(PORT_OFFSETS) as [PortName, number][]) out[name] = basePort + offset;
  return out;
}
