// Configuration comes from environment variables, described once here: `postern serve --help`
// and the README list this table, and a bad value stops start-up with a clear message.
import { availableParallelism } from 'node:os';

export interface Config {
  http: { host: string; port: number; trustProxy: boolean };
  /** HTTP worker processes sharing the port and the store (1: this process serves alone). */
  workers: number;
  dbFile: string;
  imap: {
    host: string;
    port: number;
    secure: boolean;
    masterUser: string;
    masterPassword: string;
    /** Joins the inbox's user and the master user: Dovecot's auth_master_user_separator. */
    masterSeparator: string;
    /** Connections to one inbox's mailbox at most, and to the IMAP server in all. */
    maxPerInbox: number;
    maxTotal: number;
    /** How long a request waits for a free connection before it answers 503. */
    acquireTimeoutMs: number;
    /** An inbox watcher's lease among the processes sharing the store (renewed every third of it). */
    watchLeaseMs: number;
  };
  smtp: { host: string; port: number; secure: boolean };
  redisUrl: string | null;
  /** Seals epoch private keys at rest; 32+ bytes, base64 or hex. */
  masterKey: string | null;
  tokenTtlSeconds: number;
  sessionTtlSeconds: number;
  events: { settleMs: number };
  stream: { heartbeatMs: number; maxDurationMs: number; recheckMs: number };
  logLevel: string;
}

type Env = Readonly<Record<string, string | undefined>>;

interface Setting {
  name: string;
  default: string;
  description: string;
}

export const SETTINGS: readonly Setting[] = [
  { name: 'POSTERN_HOST', default: '127.0.0.1', description: 'address the HTTP server listens on' },
  { name: 'POSTERN_PORT', default: '8787', description: 'HTTP port (0 picks a free one)' },
  { name: 'POSTERN_WORKERS', default: '1', description: 'worker processes serving HTTP on one port and one store; "auto" = one per CPU' },
  { name: 'POSTERN_TRUST_PROXY', default: 'false', description: 'trust X-Forwarded-* from a reverse proxy' },
  { name: 'POSTERN_DB', default: './postern.db', description: 'SQLite file for identities, keys, events, idempotency' },
  { name: 'POSTERN_IMAP_HOST', default: '127.0.0.1', description: 'Dovecot IMAP host' },
  { name: 'POSTERN_IMAP_PORT', default: '143', description: 'Dovecot IMAP port' },
  { name: 'POSTERN_IMAP_SECURE', default: 'false', description: 'connect with implicit TLS' },
  { name: 'POSTERN_IMAP_MASTER_USER', default: 'postern-master', description: 'Dovecot master user Postern logs in as' },
  { name: 'POSTERN_IMAP_MASTER_PASSWORD', default: '', description: 'the master user\'s password (required to serve mail)' },
  { name: 'POSTERN_IMAP_MASTER_SEPARATOR', default: '*', description: 'Dovecot auth_master_user_separator' },
  { name: 'POSTERN_IMAP_MAX_PER_INBOX', default: '4', description: 'IMAP connections per inbox at most' },
  { name: 'POSTERN_IMAP_MAX_TOTAL', default: '200', description: 'IMAP connections in all at most' },
  { name: 'POSTERN_IMAP_ACQUIRE_TIMEOUT_MS', default: '10000', description: 'a request waits this long for a free IMAP connection, then answers 503' },
  { name: 'POSTERN_IMAP_WATCH_LEASE_MS', default: '15000', description: 'of the processes sharing the store, one watches an inbox; another takes over this long after it stops renewing' },
  { name: 'POSTERN_SMTP_HOST', default: '127.0.0.1', description: 'Postfix host Postern relays through' },
  { name: 'POSTERN_SMTP_PORT', default: '25', description: 'Postfix port' },
  { name: 'POSTERN_SMTP_SECURE', default: 'false', description: 'connect to Postfix with implicit TLS' },
  { name: 'REDIS_URL', default: '', description: 'Redis for several instances (events fan-out, watcher leases); empty: one process alone' },
  { name: 'POSTERN_MASTER_KEY', default: '', description: 'service master key sealing epoch keys (32+ random bytes, base64 or hex)' },
  { name: 'POSTERN_TOKEN_TTL', default: '7776000', description: 'default API token lifetime in seconds (90 days); 0 = never expires' },
  { name: 'POSTERN_SESSION_TTL', default: '43200', description: 'web session lifetime in seconds (12 hours)' },
  { name: 'POSTERN_EVENTS_SETTLE_MS', default: '2000', description: 'paged event reads return events at least this old' },
  { name: 'POSTERN_STREAM_HEARTBEAT_MS', default: '15000', description: 'keep-alive comment interval on event streams' },
  { name: 'POSTERN_STREAM_MAX_MS', default: '600000', description: 'an event stream (inbox or project) ends after this long; the client reconnects' },
  { name: 'POSTERN_STREAM_RECHECK_MS', default: '15000', description: 'open event streams re-check their credential and inbox access this often; one that lost them ends' },
  { name: 'POSTERN_LOG_LEVEL', default: 'info', description: 'pino log level (fatal, error, warn, info, debug, trace, silent)' },
];

export class ConfigError extends Error {}

export function loadConfig(env: Env = process.env): Config {
  const get = (name: string): string => {
    const setting = SETTINGS.find((s) => s.name === name);
    if (!setting) throw new Error(`unknown setting ${name}`);
    return env[name] ?? setting.default;
  };
  const int = (name: string, min = 0, max = Number.MAX_SAFE_INTEGER): number => {
    const raw = get(name);
    const n = Number(raw);
    if (!/^\d+$/.test(raw) || n < min || n > max) {
      throw new ConfigError(`${name} must be a whole number from ${min} to ${max}, got "${raw}"`);
    }
    return n;
  };
  const bool = (name: string): boolean => {
    const raw = get(name).toLowerCase();
    if (['1', 'true', 'yes', 'on'].includes(raw)) return true;
    if (['0', 'false', 'no', 'off', ''].includes(raw)) return false;
    throw new ConfigError(`${name} must be true or false, got "${raw}"`);
  };
  const logLevel = get('POSTERN_LOG_LEVEL');
  if (!['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].includes(logLevel)) {
    throw new ConfigError(`POSTERN_LOG_LEVEL must be a pino level, got "${logLevel}"`);
  }
  return {
    http: { host: get('POSTERN_HOST'), port: int('POSTERN_PORT', 0, 65535), trustProxy: bool('POSTERN_TRUST_PROXY') },
    workers: get('POSTERN_WORKERS') === 'auto' ? availableParallelism() : int('POSTERN_WORKERS', 1, 64),
    dbFile: get('POSTERN_DB'),
    imap: {
      host: get('POSTERN_IMAP_HOST'),
      port: int('POSTERN_IMAP_PORT', 1, 65535),
      secure: bool('POSTERN_IMAP_SECURE'),
      masterUser: get('POSTERN_IMAP_MASTER_USER'),
      masterPassword: get('POSTERN_IMAP_MASTER_PASSWORD'),
      masterSeparator: get('POSTERN_IMAP_MASTER_SEPARATOR'),
      maxPerInbox: int('POSTERN_IMAP_MAX_PER_INBOX', 1, 64),
      maxTotal: int('POSTERN_IMAP_MAX_TOTAL', 1, 10000),
      acquireTimeoutMs: int('POSTERN_IMAP_ACQUIRE_TIMEOUT_MS', 1, 600000),
      watchLeaseMs: int('POSTERN_IMAP_WATCH_LEASE_MS', 300, 600000),
    },
    smtp: { host: get('POSTERN_SMTP_HOST'), port: int('POSTERN_SMTP_PORT', 1, 65535), secure: bool('POSTERN_SMTP_SECURE') },
    redisUrl: get('REDIS_URL') || null,
    masterKey: get('POSTERN_MASTER_KEY') || null,
    tokenTtlSeconds: int('POSTERN_TOKEN_TTL'),
    sessionTtlSeconds: int('POSTERN_SESSION_TTL', 60),
    events: { settleMs: int('POSTERN_EVENTS_SETTLE_MS', 0, 60000) },
    stream: {
      heartbeatMs: int('POSTERN_STREAM_HEARTBEAT_MS', 10, 3600000),
      maxDurationMs: int('POSTERN_STREAM_MAX_MS', 100, 86400000),
      recheckMs: int('POSTERN_STREAM_RECHECK_MS', 10, 3600000),
    },
    logLevel,
  };
}

/** The settings table as `postern serve --help` prints it. */
export function describeSettings(): string {
  const width = Math.max(...SETTINGS.map((s) => s.name.length));
  return SETTINGS.map((s) => `  ${s.name.padEnd(width)}  ${s.description} (default: ${s.default === '' ? 'none' : s.default})`).join('\n');
}
