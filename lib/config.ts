// Configuration comes from environment variables, described once here: `postern serve --help`
// and the README list this table, and a bad value stops start-up with a clear message.
import { isIP } from 'node:net';
import { availableParallelism } from 'node:os';
import type { CredentialLimits } from './rate.ts';
import { DEFAULT_DISABLE_AFTER, DEFAULT_SCHEDULE, parseDuration, parseSchedule } from './webhooks/retry.ts';
import { DEFAULT_SEARCH_BOUNDS, type SearchBounds } from './mail/search-bounds.ts';

export interface Config {
  http: {
    host: string;
    port: number;
    trustProxy: boolean;
    /** A request's headers, and then its whole request (headers and body), must arrive within these (408). */
    headersTimeoutMs: number;
    requestTimeoutMs: number;
    /** A body being read that sends no byte for this long is cut (408), like nginx's client_body_timeout. */
    bodyIdleTimeoutMs: number;
    /** Open connections from one client address at most (0: no cap; not applied behind a trusted proxy). */
    maxConnectionsPerAddress: number;
    /** On SIGTERM, requests under way get this long to finish before their connections are closed. */
    shutdownGraceMs: number;
    /** GET /readyz: each dependency's check must answer within this. */
    readyTimeoutMs: number;
  };
  /** HTTP worker processes sharing the port and the store (1: this process serves alone). */
  workers: number;
  dbFile: string;
  /** POSTERN_DATABASE_URL: the store on PostgreSQL (several machines); null: SQLite at dbFile. */
  databaseUrl: string | null;
  /** PostgreSQL connections each process opens at most. */
  databasePoolSize: number;
  /** PostgreSQL: how long a process keeps a token or event type it read; a change drops it at once. */
  databaseKeepMs: number;
  /** POSTERN_DATABASE_LISTEN_URL: where the connection hearing changes LISTENs; null: databaseUrl. */
  databaseListenUrl: string | null;
  /** PostgreSQL: how often each process checks that connection still hears (docs/deployment.md). */
  databaseHeartbeatMs: number;
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
    /** Connections watchers may never take, so reads always find one (from POSTERN_IMAP_READ_RESERVE_PERCENT). */
    reservedForReads: number;
    /** An inbox watcher's lease among the processes sharing the store (renewed every third of it). */
    watchLeaseMs: number;
    /** A body/text search still unanswered after this answers 503; Dovecot goes on indexing. */
    bodySearchTimeoutMs: number;
    /** Compatible inboxes' previews fetched as mail is indexed (docs/threads.md, "Previews"). */
    previews?: boolean;
  };
  /** The relay: Postfix's submission service, logged in to as each inbox's user (docs/sending.md). */
  smtp: { host: string; port: number; secure: boolean; maxPerInbox: number; timeoutMs: number };
  /** What one message search may ask of the store's text index (docs/search.md, "What a search may cost"). */
  search: SearchBounds;
  /** Postern's own sending limit per inbox, before the relay's. */
  send: { perHour: number; copyYieldMs: number; horizonMs: number };
  /** The LMTP delivery ingress (Postfix → Postern → Dovecot); `listen` null: off. */
  ingress: {
    listen: { host: string; port: number } | null;
    dovecot: { host: string; port: number };
    /** Dovecot's `recipient_delimiter`: each character starts an address's detail (empty: none). */
    recipientDelimiter: string;
  };
  /** Every inbox watched, always (docs/watch.md). */
  watch: {
    mode: 'push' | 'notify' | 'off';
    /** The internal listener for Dovecot's push hints (push mode), and its shared secret. */
    hints: { host: string; port: number; secret: string } | null;
    /** Why this mode (what POSTERN_WATCH and POSTERN_HINT_LISTEN said), for the logs and `inbox status`. */
    reason: string;
    sweepMs: number;
    sweepConcurrency: number;
    /** How often a server checks the store for inboxes another process added or removed. */
    catalogPollMs: number;
    /** How long a read waits for an inbox's first index before answering 503. */
    fillWaitMs: number;
  };
  redisUrl: string | null;
  /** Seals epoch private keys at rest; 32+ bytes, base64 or hex. */
  masterKey: string | null;
  tokenTtlSeconds: number;
  sessionTtlSeconds: number;
  /** The web app: its origin (WebAuthn's origin and, from its host, RP ID) and invite lifetime. */
  app: {
    origin: string;
    inviteTtlSeconds: number;
    ceremoniesPerMinute: number;
    /** How old a re-authentication (and the session that sets a first key) may be. */
    reauthMaxAgeSeconds: number;
  };
  events: { settleMs: number };
  /** Networks webhook deliveries may reach although they are not public (POSTERN_WEBHOOK_ALLOW). */
  webhookAllow: Cidr[];
  /** http:// webhook URLs to loopback addresses are accepted, for development (POSTERN_WEBHOOK_ALLOW_HTTP_LOOPBACK). */
  webhookAllowHttpLoopback: boolean;
  /** The webhook dispatcher (lib/webhooks/dispatcher.ts, docs/webhooks.md). */
  webhooks: {
    scheduleMs: number[];
    disableAfterMs: number;
    timeoutMs: number;
    concurrency: number;
    leaseMs: number;
    pollMs: number;
    keepMs: number;
    /** Attempts under way at once in a process: all projects' (POSTERN_WEBHOOK_MAX_IN_FLIGHT), one project's (POSTERN_WEBHOOK_PROJECT_CONCURRENCY). */
    maxInFlight: number;
    projectConcurrency: number;
    /** Attempts a second to one project's failing endpoints, per process (POSTERN_WEBHOOK_FAILING_PER_SECOND; 0: no limit). */
    failingPerSecond: number;
    /** POST /webhooks/{id}/test calls per endpoint a minute, per process. */
    testsPerMinute: number;
    /** How webhook hosts are resolved (adapters/webhooks/dns.ts). */
    dns: {
      /** Name servers (`host` or `host:port`); null: the system's (/etc/resolv.conf). */
      servers: string[] | null;
      timeoutMs: number;
      tries: number;
      negativeTtlMs: number;
      /** Lookups under way at once for one project, per process. */
      perProject: number;
    };
  };
  stream: {
    heartbeatMs: number;
    maxDurationMs: number;
    recheckMs: number;
    /** Open live streams of each kind (inbox, project events) per credential and per project, in this process (0: no cap). */
    maxPerCredential: number;
    maxPerProject: number;
  };
  /** Each token's and session's request budgets, per process (lib/rate.ts, docs/access.md). */
  rate: CredentialLimits;
  /** Bounds on one POST /v1/mcp request (docs/mcp.md, "Bounds"). */
  mcp: {
    /** JSON-RPC messages one batch may hold; a larger batch is refused. */
    batchMax: number;
    /** Calls of one request under way at once. */
    batchConcurrency: number;
    /** Time one request's calls share: a call not started by then is answered with an error. */
    batchBudgetMs: number;
  };
  /** POSTERN_METRICS_LISTEN: the internal Prometheus listener; null: no metrics at all. */
  metrics: { host: string; port: number } | null;
  logLevel: string;
}

/** An address block, `network/prefix` (POSTERN_WEBHOOK_ALLOW). */
export interface Cidr {
  network: string;
  prefix: number;
  family: 'ipv4' | 'ipv6';
}

type Env = Readonly<Record<string, string | undefined>>;

interface Setting {
  name: string;
  default: string;
  description: string;
  /** `postern serve` refuses to start without a value (it could answer nothing but 503). */
  requiredToServe?: boolean;
}

export const SETTINGS: readonly Setting[] = [
  { name: 'POSTERN_HOST', default: '127.0.0.1', description: 'address the HTTP server listens on' },
  { name: 'POSTERN_PORT', default: '8787', description: 'HTTP port (0 picks a free one)' },
  { name: 'POSTERN_WORKERS', default: '1', description: 'worker processes serving HTTP on one port and one store; "auto" = one per CPU' },
  { name: 'POSTERN_TRUST_PROXY', default: 'false', description: 'trust X-Forwarded-* from a reverse proxy' },
  {
    name: 'POSTERN_HEADERS_TIMEOUT_MS',
    default: '20000',
    description:
      "a request's headers must arrive within this long of connecting (or of the previous response), else 408 and the connection closes",
  },
  {
    name: 'POSTERN_REQUEST_TIMEOUT_MS',
    default: '300000',
    description:
      "a request's headers and body must arrive within this long (Node's default: room for a large send on a slow link), else 408 and the connection closes; an open event stream is not cut by it",
  },
  {
    name: 'POSTERN_BODY_IDLE_TIMEOUT_MS',
    default: '30000',
    description:
      "a request body that sends no byte for this long while it is read is cut: 408 and the connection closes (like nginx's client_body_timeout); a slow body that keeps moving has POSTERN_REQUEST_TIMEOUT_MS",
  },
  {
    name: 'POSTERN_MAX_CONNECTIONS_PER_ADDRESS',
    default: '256',
    description:
      "open connections from one client address at most, more get 429; 0 = no cap; not applied with POSTERN_TRUST_PROXY (the proxy is every client's address)",
  },
  {
    name: 'POSTERN_SHUTDOWN_GRACE_MS',
    default: '10000',
    description:
      'on SIGTERM the server stops accepting connections, ends event streams with a reconnect hint and gives requests under way this long to finish, then closes what is left and exits',
  },
  {
    name: 'POSTERN_READY_TIMEOUT_MS',
    default: '2000',
    description:
      'GET /readyz: the store, the IMAP master login and SMTP submission must each answer within this (checked in parallel, the answer kept for 1 s)',
  },
  { name: 'POSTERN_DB', default: './postern.db', description: 'SQLite file for identities, keys, events, idempotency' },
  {
    name: 'POSTERN_DATABASE_URL',
    default: '',
    description:
      'the store on PostgreSQL (postgres://user:password@host:port/db), for several machines sharing it (docs/deployment.md); empty: SQLite at POSTERN_DB',
  },
  { name: 'POSTERN_DATABASE_POOL', default: '10', description: 'PostgreSQL connections each process (each worker) opens at most' },
  {
    name: 'POSTERN_DATABASE_KEEP_MS',
    default: '10000',
    description:
      'PostgreSQL: how long a process keeps an API token, event type, grant, inbox or index state it read; a change through any process drops it at once (LISTEN/NOTIFY), or within 3 heartbeats (POSTERN_DATABASE_HEARTBEAT_MS) if the listening connection went silent; 0: read the database on every request',
  },
  {
    name: 'POSTERN_DATABASE_LISTEN_URL',
    default: '',
    description:
      "PostgreSQL: where each process's one connection that hears changes (LISTEN) goes, when POSTERN_DATABASE_URL goes through a PgBouncer in transaction mode (which passes no notices): the same database, directly or through a session-mode pool; empty: POSTERN_DATABASE_URL",
  },
  {
    name: 'POSTERN_DATABASE_HEARTBEAT_MS',
    default: '1000',
    description:
      'PostgreSQL: how often each process sends itself a notice to check that its listening connection hears changes; what it kept is served only while one sent within 3 heartbeats came back, so a change takes effect within 3 heartbeats even if that connection went silent (docs/deployment.md)',
  },
  { name: 'POSTERN_IMAP_HOST', default: '127.0.0.1', description: 'Dovecot IMAP host' },
  { name: 'POSTERN_IMAP_PORT', default: '143', description: 'Dovecot IMAP port' },
  { name: 'POSTERN_IMAP_SECURE', default: 'false', description: 'connect with implicit TLS' },
  { name: 'POSTERN_IMAP_MASTER_USER', default: 'postern-master', description: 'Dovecot master user Postern logs in as' },
  {
    name: 'POSTERN_IMAP_MASTER_PASSWORD',
    default: '',
    description: 'the password of the Dovecot master user; without it no mailbox can be read',
    requiredToServe: true,
  },
  { name: 'POSTERN_IMAP_MASTER_SEPARATOR', default: '*', description: 'Dovecot auth_master_user_separator' },
  { name: 'POSTERN_IMAP_MAX_PER_INBOX', default: '4', description: 'IMAP connections per inbox at most' },
  { name: 'POSTERN_IMAP_MAX_TOTAL', default: '200', description: 'IMAP connections in all at most' },
  {
    name: 'POSTERN_IMAP_READ_RESERVE_PERCENT',
    default: '20',
    description: 'share of POSTERN_IMAP_MAX_TOTAL (rounded down) that inbox watchers never take, kept for reads',
  },
  {
    name: 'POSTERN_IMAP_ACQUIRE_TIMEOUT_MS',
    default: '10000',
    description: 'a request waits this long for a free IMAP connection, then answers 503',
  },
  {
    name: 'POSTERN_BODY_SEARCH_TIMEOUT_MS',
    default: '20000',
    description:
      'a body or text search Dovecot has not answered within this (it is indexing the mailbox for its first one) answers 503 with Retry-After; Dovecot goes on indexing',
  },
  {
    name: 'POSTERN_INDEX_PREVIEWS',
    default: 'false',
    description:
      "true: the index keeps Dovecot's ~200-character PREVIEW of each compatible inbox's message, fetched as it is indexed (docs/threads.md, \"Previews\"); with Dovecot's fts plugin this also fills the body search index",
  },
  {
    name: 'POSTERN_SEARCH_MAX_WORDS',
    default: String(DEFAULT_SEARCH_BOUNDS.maxWords),
    description: 'a message search may have this many words in from, to, cc and subject together; more answer 422',
  },
  {
    name: 'POSTERN_SEARCH_MAX_PREFIXES',
    default: String(DEFAULT_SEARCH_BOUNDS.maxPrefixes),
    description:
      'a message search may have this many space-separated pieces ending in a word matched as a prefix (from, to, cc and subject together); more answer 422',
  },
  {
    name: 'POSTERN_SEARCH_MIN_PREFIX',
    default: String(DEFAULT_SEARCH_BOUNDS.minPrefix),
    description:
      'the last word of a search piece matches as a prefix when it has at least this many characters; a shorter one matches only that whole word',
  },
  {
    name: 'POSTERN_SEARCH_TIMEOUT_MS',
    default: String(DEFAULT_SEARCH_BOUNDS.budgetMs),
    description:
      "a message search's statement still running after this answers 503 with Retry-After: cancelled on PostgreSQL; on SQLite, where it runs in a worker thread, that worker is abandoned for a fresh one (docs/search.md)",
  },
  {
    name: 'POSTERN_IMAP_WATCH_LEASE_MS',
    default: '15000',
    description: 'of the processes sharing the store, one watches an inbox; another takes over this long after it stops renewing',
  },
  {
    name: 'POSTERN_WATCH',
    default: 'auto',
    description:
      "how every inbox is watched without a stream: push (Dovecot's push hints, needs POSTERN_HINT_LISTEN), notify (a NOTIFY connection per inbox), off; auto = push when POSTERN_HINT_LISTEN is set, else notify",
  },
  {
    name: 'POSTERN_HINT_LISTEN',
    default: '',
    description:
      "host:port of the internal listener for Dovecot's push hints (docker/dovecot/postern-push.lua); keep it off the public network; empty: no listener",
  },
  {
    name: 'POSTERN_HINT_SECRET',
    default: '',
    description: "shared secret Dovecot's push script sends (Bearer); required with POSTERN_HINT_LISTEN, 16+ characters",
  },
  {
    name: 'POSTERN_WATCH_SWEEP_MS',
    default: '60000',
    description:
      'every this long one process syncs every inbox (one LIST-STATUS each when unchanged), catching lost push hints; 0 = no sweep',
  },
  { name: 'POSTERN_WATCH_SWEEP_CONCURRENCY', default: '4', description: 'inboxes the sweep syncs at once' },
  {
    name: 'POSTERN_WATCH_CATALOG_POLL_MS',
    default: '500',
    description:
      'how often a server checks the store for inboxes `postern admin inbox add/remove` added or removed (one row read); 0 = only at each sweep',
  },
  {
    name: 'POSTERN_FILL_WAIT_MS',
    default: '10000',
    description:
      'a read of an inbox still being indexed for the first time waits this long (unless what it asks is already indexed), then answers 503 with Retry-After',
  },
  { name: 'POSTERN_SMTP_HOST', default: '127.0.0.1', description: 'Postfix host Postern relays through' },
  { name: 'POSTERN_SMTP_PORT', default: '587', description: 'Postfix submission port (SASL through Dovecot)' },
  { name: 'POSTERN_SMTP_SECURE', default: 'false', description: 'connect to Postfix with implicit TLS' },
  { name: 'POSTERN_SMTP_MAX_PER_INBOX', default: '4', description: 'pooled connections to Postfix per inbox at most' },
  {
    name: 'POSTERN_SMTP_TIMEOUT_MS',
    default: '30000',
    description: 'Postfix must connect, greet and answer within this; otherwise the send is a 503',
  },
  {
    name: 'POSTERN_SEND_RATE_PER_HOUR',
    default: '300',
    description: 'messages one inbox may send per hour (both send operations); over it: 422',
  },
  {
    name: 'POSTERN_SEND_HORIZON',
    default: '30d',
    description: 'how far ahead a send may be scheduled (sendAt; docs/sending.md, "Send later"); further: 422',
  },
  {
    name: 'POSTERN_SENT_COPY_YIELD_MS',
    default: '2000',
    description: 'filing Sent copies waits while sends are under way in the process, at most this long per copy; 0 = file at once',
  },
  { name: 'POSTERN_LMTP_HOST', default: '127.0.0.1', description: 'address the LMTP delivery ingress listens on (Postfix delivers here)' },
  { name: 'POSTERN_LMTP_PORT', default: '', description: 'LMTP delivery ingress port; empty: no ingress' },
  { name: 'POSTERN_DOVECOT_LMTP_HOST', default: '127.0.0.1', description: 'Dovecot LMTP host the ingress hands mail on to' },
  { name: 'POSTERN_DOVECOT_LMTP_PORT', default: '24', description: 'Dovecot LMTP port' },
  {
    name: 'POSTERN_RECIPIENT_DELIMITER',
    default: '+',
    description:
      "Dovecot's recipient_delimiter (each character starts a detail, as in user+news@…); the ingress resolves recipients with it, so it must equal Dovecot's; empty: no details",
  },
  {
    name: 'REDIS_URL',
    default: '',
    description: 'Redis for several instances: carries events and live inbox changes between them; empty: one process alone',
  },
  { name: 'POSTERN_MASTER_KEY', default: '', description: 'service master key sealing epoch keys (32+ random bytes, base64 or hex)' },
  { name: 'POSTERN_TOKEN_TTL', default: '7776000', description: 'default API token lifetime in seconds (90 days); 0 = never expires' },
  { name: 'POSTERN_SESSION_TTL', default: '43200', description: 'web session lifetime in seconds (12 hours)' },
  {
    name: 'POSTERN_APP_ORIGIN',
    default: 'http://localhost:8787',
    description: "the web app's origin as browsers see it (https://…, or http://localhost…): passkeys are bound to its host name",
  },
  {
    name: 'POSTERN_SIGN_IN_RATE_PER_MINUTE',
    default: '30',
    description: 'passkey sign-in and enrollment requests one client address may make per minute (per worker), more get 429; 0 = no limit',
  },
  { name: 'POSTERN_INVITE_TTL', default: '604800', description: 'default passkey enrollment invite lifetime in seconds (7 days)' },
  {
    name: 'POSTERN_REAUTH_MAX_AGE',
    default: '300',
    description:
      'seconds a re-authentication challenge (replacing the key, adding a passkey) stays answerable, and how old a session may be to set the first key without one',
  },
  {
    name: 'POSTERN_WEBHOOK_ALLOW',
    default: '',
    description:
      'comma-separated networks (10.1.2.0/24, fd00::/8, or one address) webhook deliveries may reach although they are loopback, private, link-local or otherwise not public; empty: public addresses only (docs/webhooks.md)',
  },
  {
    name: 'POSTERN_WEBHOOK_ALLOW_HTTP_LOOPBACK',
    default: 'false',
    description:
      'accept http:// webhook URLs to loopback addresses (localhost, 127.0.0.0/8, ::1), for development; otherwise https:// only',
  },
  {
    name: 'POSTERN_WEBHOOK_RETRY_SCHEDULE',
    default: DEFAULT_SCHEDULE,
    description:
      'waits before each retry of a failed webhook delivery (ms, s, m, h, d), jittered ±20%; after the last the delivery is given up',
  },
  {
    name: 'POSTERN_WEBHOOK_DISABLE_AFTER',
    default: DEFAULT_DISABLE_AFTER,
    description: 'a webhook endpoint whose every attempt has failed for this long is disabled (webhook.endpoint.disabled is recorded)',
  },
  { name: 'POSTERN_WEBHOOK_TIMEOUT_MS', default: '15000', description: 'one webhook attempt (connect, send, answer) may take this long' },
  { name: 'POSTERN_WEBHOOK_CONCURRENCY', default: '8', description: 'webhook attempts under way at once to one endpoint, per process' },
  {
    name: 'POSTERN_WEBHOOK_PROJECT_CONCURRENCY',
    default: '64',
    description:
      "webhook attempts under way at once to all of one project's endpoints, per process: a project's slow receivers hold back only its own deliveries",
  },
  {
    name: 'POSTERN_WEBHOOK_MAX_IN_FLIGHT',
    default: '512',
    description: 'webhook attempts under way at once in a process, over every project (at least POSTERN_WEBHOOK_PROJECT_CONCURRENCY)',
  },
  {
    name: 'POSTERN_WEBHOOK_FAILING_PER_SECOND',
    default: '20',
    description:
      "webhook attempts started per second to one project's failing endpoints (the last attempt failed), per process; the rest wait their turn, a 2xx makes an endpoint healthy again; 0 = no limit",
  },
  {
    name: 'POSTERN_WEBHOOK_TESTS_PER_MINUTE',
    default: '5',
    description:
      'POST /webhooks/{id}/test calls one endpoint may make per minute, per process (as many at once, then evenly; more get 429 with Retry-After); 0 = no limit',
  },
  {
    name: 'POSTERN_WEBHOOK_DNS_SERVERS',
    default: '',
    description:
      "comma-separated name servers (address or address:port) webhook hosts are resolved with; empty: the system's (/etc/resolv.conf). /etc/hosts and localhost are honoured either way",
  },
  {
    name: 'POSTERN_WEBHOOK_DNS_TIMEOUT_MS',
    default: '2000',
    description: "one try of a webhook host's DNS query waits this long for an answer",
  },
  { name: 'POSTERN_WEBHOOK_DNS_TRIES', default: '2', description: "tries of a webhook host's DNS query per name server before it fails" },
  {
    name: 'POSTERN_WEBHOOK_DNS_NEGATIVE_TTL',
    default: '60s',
    description: 'a webhook host that did not resolve (no such name, no address, no answer) is not asked again for this long',
  },
  {
    name: 'POSTERN_WEBHOOK_DNS_PER_PROJECT',
    default: '4',
    description:
      "DNS lookups of webhook hosts under way at once for one project, per process (the rest wait, within their attempt's timeout)",
  },
  {
    name: 'POSTERN_WEBHOOK_LEASE_MS',
    default: '60000',
    description:
      'a process holds a delivery it took this long; a process that died leaves its deliveries to others after it (more than POSTERN_WEBHOOK_TIMEOUT_MS)',
  },
  {
    name: 'POSTERN_WEBHOOK_POLL_MS',
    default: '1000',
    description: 'how often the webhook dispatcher looks for endpoints and due retries without being woken by an event',
  },
  {
    name: 'POSTERN_WEBHOOK_KEEP',
    default: '7d',
    description: 'settled webhook deliveries (delivered or given up) are listed for this long, then forgotten',
  },
  { name: 'POSTERN_EVENTS_SETTLE_MS', default: '2000', description: 'paged event reads return events at least this old' },
  { name: 'POSTERN_STREAM_HEARTBEAT_MS', default: '15000', description: 'keep-alive comment interval on event streams' },
  {
    name: 'POSTERN_STREAM_MAX_MS',
    default: '600000',
    description: 'an event stream (inbox or project) ends after this long; the client reconnects',
  },
  {
    name: 'POSTERN_STREAM_RECHECK_MS',
    default: '15000',
    description:
      'open event streams and MCP notification streams re-check their credential and inbox access this often; one that lost them ends, an MCP subscription whose inbox was lost is dropped',
  },
  {
    name: 'POSTERN_STREAM_MAX_PER_CREDENTIAL',
    default: '20',
    description: 'open streams of each kind (inbox, project events) one token or session may hold in a process, more get 429; 0 = no cap',
  },
  {
    name: 'POSTERN_STREAM_MAX_PER_PROJECT',
    default: '60',
    description: 'open streams of each kind all credentials of one project may hold in a process, more get 429; 0 = no cap',
  },
  {
    name: 'POSTERN_RATE_REQUESTS',
    default: '100',
    description:
      'requests per second (a decimal number: 0.5 is one every two seconds) one token or session may make, sustained, in each process (with POSTERN_WORKERS=n up to n times as many), more get 429 with Retry-After; 0 = no limit',
  },
  {
    name: 'POSTERN_RATE_BURST',
    default: '200',
    description: "requests one token or session may make at once before POSTERN_RATE_REQUESTS applies (its bucket's size)",
  },
  {
    name: 'POSTERN_RATE_EXPENSIVE',
    default: '10',
    description:
      'searches, whole-message downloads (/raw, /source) and MCP tool calls per second one token or session may make, sustained, in each process, besides POSTERN_RATE_REQUESTS; more get 429 with Retry-After; 0 = no limit',
  },
  {
    name: 'POSTERN_RATE_EXPENSIVE_BURST',
    default: '40',
    description: 'expensive calls one token or session may make at once before POSTERN_RATE_EXPENSIVE applies',
  },
  {
    name: 'POSTERN_RATE_REFUSAL_DELAY_MS',
    default: '1000',
    description:
      "a request refused by POSTERN_RATE_REQUESTS or POSTERN_RATE_EXPENSIVE gets its 429 after this long (at most its Retry-After), so a client asking again at once cannot spend the process's time on refusals; 0 = at once",
  },
  {
    name: 'POSTERN_RATE_PER_TURN',
    default: '4',
    description:
      "requests of one token or session a process starts in one turn of its event loop; more start in the next turns, each caller's share in turn, so one caller's many connections cannot make every turn long and hold up everyone else's requests and new connections; 0 = no limit",
  },
  {
    name: 'POSTERN_MCP_BATCH_MAX',
    default: '20',
    description: 'JSON-RPC messages one POST /v1/mcp batch may hold (at most 100), a larger batch is refused with 400',
  },
  {
    name: 'POSTERN_MCP_BATCH_CONCURRENCY',
    default: '4',
    description: 'calls of one POST /v1/mcp request (a batch) under way at once; the rest wait their turn',
  },
  {
    name: 'POSTERN_MCP_BATCH_BUDGET_MS',
    default: '10000',
    description:
      'time the calls of one POST /v1/mcp request share: a call not started within it is answered with a JSON-RPC error, and a client that disconnects stops the calls not yet started',
  },
  {
    name: 'POSTERN_METRICS_LISTEN',
    default: '',
    description:
      "host:port of the internal Prometheus listener (GET /metrics; with POSTERN_WORKERS the primary serves every worker's, aggregated); keep it off the public network; empty: no metrics are kept",
  },
  { name: 'POSTERN_LOG_LEVEL', default: 'info', description: 'pino log level (fatal, error, warn, info, debug, trace, silent)' },
];

export class ConfigError extends Error {}

/** `serve`: the configuration will serve requests, so settings required to serve must be set. */
export function loadConfig(env: Env = process.env, options: { serve?: boolean } = {}): Config {
  if (options.serve) {
    for (const s of SETTINGS) {
      if (s.requiredToServe && (env[s.name] ?? s.default) === '') {
        throw new ConfigError(`${s.name} is not set: postern serve needs ${s.description}`);
      }
    }
  }
  const get = (name: string): string => {
    const setting = SETTINGS.find((s) => s.name === name);
    if (!setting) throw new Error(`unknown setting ${name}`);
    return env[name] ?? setting.default;
  };
  /** A name or address: set to nothing (or blanks) is a mistake, not a request for the default. */
  const text = (name: string): string => {
    const raw = get(name);
    if (raw.trim() === '' || raw !== raw.trim()) throw new ConfigError(`${name} must not be empty or padded with blanks, got "${raw}"`);
    return raw;
  };
  const url = (name: string, protocols: string[]): string | null => {
    const raw = get(name);
    if (raw === '') return null;
    let parsed: URL | null = null;
    try {
      parsed = new URL(raw);
    } catch {
      // reported below
    }
    // The value is not echoed: a URL may carry a password.
    if (!parsed || !protocols.includes(parsed.protocol) || parsed.hostname === '') {
      throw new ConfigError(`${name} must be a ${protocols.map((p) => `${p}//`).join(' or ')} URL with a host`);
    }
    return raw;
  };
  const int = (name: string, min = 0, max = Number.MAX_SAFE_INTEGER): number => {
    const raw = get(name);
    const n = Number(raw);
    if (!/^\d+$/.test(raw) || n < min || n > max) {
      throw new ConfigError(`${name} must be a whole number from ${min} to ${max}, got "${raw}"`);
    }
    return n;
  };
  /** A rate: a whole or decimal number (0.5 a second is one every two seconds). */
  const decimal = (name: string, max: number): number => {
    const raw = get(name);
    const n = Number(raw);
    if (!/^\d+(?:\.\d+)?$/.test(raw) || n > max)
      throw new ConfigError(`${name} must be a number from 0 to ${max} (such as 10 or 0.5), got "${raw}"`);
    return n;
  };
  const bool = (name: string): boolean => {
    const raw = get(name).toLowerCase();
    if (['1', 'true', 'yes', 'on'].includes(raw)) return true;
    if (['0', 'false', 'no', 'off', ''].includes(raw)) return false;
    throw new ConfigError(`${name} must be true or false, got "${raw}"`);
  };
  const duration = (name: string): number => {
    const ms = parseDuration(get(name));
    if (ms === null || ms === 0) throw new ConfigError(`${name} must be a duration such as 500ms, 30s, 5m, 2h or 3d, got "${get(name)}"`);
    return ms;
  };
  const webhookSettings = (): Config['webhooks'] => {
    const scheduleMs = parseSchedule(get('POSTERN_WEBHOOK_RETRY_SCHEDULE'));
    if (!scheduleMs)
      throw new ConfigError(
        `POSTERN_WEBHOOK_RETRY_SCHEDULE must be comma-separated durations such as ${DEFAULT_SCHEDULE}, got "${get('POSTERN_WEBHOOK_RETRY_SCHEDULE')}"`,
      );
    const timeoutMs = int('POSTERN_WEBHOOK_TIMEOUT_MS', 100, 120000);
    const leaseMs = int('POSTERN_WEBHOOK_LEASE_MS', 1000, 3600000);
    // A lease lapsing while its attempt still runs would let a second process send the event too.
    if (leaseMs <= timeoutMs)
      throw new ConfigError(`POSTERN_WEBHOOK_LEASE_MS (${leaseMs}) must be over POSTERN_WEBHOOK_TIMEOUT_MS (${timeoutMs})`);
    const projectConcurrency = int('POSTERN_WEBHOOK_PROJECT_CONCURRENCY', 1, 4096);
    const maxInFlight = int('POSTERN_WEBHOOK_MAX_IN_FLIGHT', 1, 65536);
    if (maxInFlight < projectConcurrency)
      throw new ConfigError(
        `POSTERN_WEBHOOK_MAX_IN_FLIGHT (${maxInFlight}) must be at least POSTERN_WEBHOOK_PROJECT_CONCURRENCY (${projectConcurrency})`,
      );
    const dnsServers = get('POSTERN_WEBHOOK_DNS_SERVERS')
      .split(',')
      .map((x) => x.trim())
      .filter((x) => x !== '');
    for (const server of dnsServers) {
      // An address, [v6]:port or v4:port: what dns.Resolver.setServers takes (a name would need a lookup of its own).
      const host = /^\[(.+)\](?::\d+)?$/.exec(server)?.[1] ?? /^([^:]+)(?::\d+)?$/.exec(server)?.[1] ?? server;
      if (isIP(host) === 0)
        throw new ConfigError(`POSTERN_WEBHOOK_DNS_SERVERS must list addresses (1.1.1.1, 127.0.0.1:5353, [::1]:53), got "${server}"`);
    }
    return {
      scheduleMs,
      disableAfterMs: duration('POSTERN_WEBHOOK_DISABLE_AFTER'),
      timeoutMs,
      concurrency: int('POSTERN_WEBHOOK_CONCURRENCY', 1, 256),
      leaseMs,
      pollMs: int('POSTERN_WEBHOOK_POLL_MS', 10, 600000),
      keepMs: duration('POSTERN_WEBHOOK_KEEP'),
      maxInFlight,
      projectConcurrency,
      failingPerSecond: int('POSTERN_WEBHOOK_FAILING_PER_SECOND', 0, 100000),
      testsPerMinute: int('POSTERN_WEBHOOK_TESTS_PER_MINUTE', 0, 10000),
      dns: {
        servers: dnsServers.length === 0 ? null : dnsServers,
        timeoutMs: int('POSTERN_WEBHOOK_DNS_TIMEOUT_MS', 10, 60000),
        tries: int('POSTERN_WEBHOOK_DNS_TRIES', 1, 10),
        negativeTtlMs: duration('POSTERN_WEBHOOK_DNS_NEGATIVE_TTL'),
        perProject: int('POSTERN_WEBHOOK_DNS_PER_PROJECT', 1, 1024),
      },
    };
  };
  const logLevel = get('POSTERN_LOG_LEVEL');
  if (!['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].includes(logLevel)) {
    throw new ConfigError(`POSTERN_LOG_LEVEL must be a pino level, got "${logLevel}"`);
  }
  const headersTimeoutMs = int('POSTERN_HEADERS_TIMEOUT_MS', 100, 600000);
  const requestTimeoutMs = int('POSTERN_REQUEST_TIMEOUT_MS', 100, 3600000);
  // Node refuses a headers deadline later than the whole request's.
  if (headersTimeoutMs > requestTimeoutMs) {
    throw new ConfigError(
      `POSTERN_HEADERS_TIMEOUT_MS (${headersTimeoutMs}) must not be over POSTERN_REQUEST_TIMEOUT_MS (${requestTimeoutMs})`,
    );
  }
  const maxTotal = int('POSTERN_IMAP_MAX_TOTAL', 1, 10000);
  /** host:port, [v6]:port; null when empty. */
  const hostPort = (name: string): { host: string; port: number } | null => {
    const raw = get(name);
    if (raw === '') return null;
    const m = /^(\[[0-9a-fA-F:.]+\]|[^\s:\[\]]+):(\d{1,5})$/.exec(raw);
    const port = m ? Number(m[2]) : -1;
    if (!m || port > 65535) throw new ConfigError(`${name} must be host:port, got "${raw}"`);
    return { host: m[1]!.replace(/^\[|\]$/g, ''), port };
  };
  const hintListen = hostPort('POSTERN_HINT_LISTEN');
  let hints: Config['watch']['hints'] = null;
  if (hintListen) {
    const secret = get('POSTERN_HINT_SECRET');
    // Not echoed: it is a secret. Token characters only, as the push script sends it.
    if (secret.length < 16 || !/^[A-Za-z0-9\-._~+/=]+$/.test(secret)) {
      throw new ConfigError('POSTERN_HINT_SECRET must be set with POSTERN_HINT_LISTEN: 16 or more of A-Z a-z 0-9 - . _ ~ + / =');
    }
    hints = { ...hintListen, secret };
  }
  const recipientDelimiter = get('POSTERN_RECIPIENT_DELIMITER');
  if (!/^[!#-'*+\-/=?^_`{|}~.]*$/.test(recipientDelimiter)) {
    throw new ConfigError(
      `POSTERN_RECIPIENT_DELIMITER must be characters an address's local part may hold, not letters or digits (like Dovecot's recipient_delimiter: + or +-), got "${recipientDelimiter}"`,
    );
  }
  const watchMode = get('POSTERN_WATCH');
  if (!['auto', 'push', 'notify', 'off'].includes(watchMode))
    throw new ConfigError(`POSTERN_WATCH must be auto, push, notify or off, got "${watchMode}"`);
  if (watchMode === 'push' && !hints) throw new ConfigError('POSTERN_WATCH=push needs POSTERN_HINT_LISTEN and POSTERN_HINT_SECRET');
  return {
    http: {
      host: text('POSTERN_HOST'),
      port: int('POSTERN_PORT', 0, 65535),
      trustProxy: bool('POSTERN_TRUST_PROXY'),
      headersTimeoutMs,
      requestTimeoutMs,
      bodyIdleTimeoutMs: int('POSTERN_BODY_IDLE_TIMEOUT_MS', 100, 3600000),
      maxConnectionsPerAddress: int('POSTERN_MAX_CONNECTIONS_PER_ADDRESS', 0, 1000000),
      shutdownGraceMs: int('POSTERN_SHUTDOWN_GRACE_MS', 0, 3600000),
      readyTimeoutMs: int('POSTERN_READY_TIMEOUT_MS', 50, 60000),
    },
    workers: get('POSTERN_WORKERS') === 'auto' ? availableParallelism() : int('POSTERN_WORKERS', 1, 64),
    dbFile: text('POSTERN_DB'),
    databaseUrl: url('POSTERN_DATABASE_URL', ['postgres:', 'postgresql:']),
    databasePoolSize: int('POSTERN_DATABASE_POOL', 1, 1000),
    databaseKeepMs: int('POSTERN_DATABASE_KEEP_MS', 0, 3600000),
    databaseListenUrl: url('POSTERN_DATABASE_LISTEN_URL', ['postgres:', 'postgresql:']),
    databaseHeartbeatMs: int('POSTERN_DATABASE_HEARTBEAT_MS', 50, 60000),
    imap: {
      host: text('POSTERN_IMAP_HOST'),
      port: int('POSTERN_IMAP_PORT', 1, 65535),
      secure: bool('POSTERN_IMAP_SECURE'),
      masterUser: text('POSTERN_IMAP_MASTER_USER'),
      masterPassword: get('POSTERN_IMAP_MASTER_PASSWORD'),
      masterSeparator: text('POSTERN_IMAP_MASTER_SEPARATOR'),
      maxPerInbox: int('POSTERN_IMAP_MAX_PER_INBOX', 1, 64),
      maxTotal,
      // Rounded down and at most 90%: a small pool (the tests' single connection) keeps room for a watcher.
      reservedForReads: Math.floor((maxTotal * int('POSTERN_IMAP_READ_RESERVE_PERCENT', 0, 90)) / 100),
      acquireTimeoutMs: int('POSTERN_IMAP_ACQUIRE_TIMEOUT_MS', 1, 600000),
      watchLeaseMs: int('POSTERN_IMAP_WATCH_LEASE_MS', 300, 600000),
      bodySearchTimeoutMs: int('POSTERN_BODY_SEARCH_TIMEOUT_MS', 1, 290000),
      previews: bool('POSTERN_INDEX_PREVIEWS'),
    },
    smtp: {
      host: get('POSTERN_SMTP_HOST'),
      port: int('POSTERN_SMTP_PORT', 1, 65535),
      secure: bool('POSTERN_SMTP_SECURE'),
      maxPerInbox: int('POSTERN_SMTP_MAX_PER_INBOX', 1, 64),
      timeoutMs: int('POSTERN_SMTP_TIMEOUT_MS', 100, 600000),
    },
    search: {
      maxWords: int('POSTERN_SEARCH_MAX_WORDS', 1, 512),
      maxPrefixes: int('POSTERN_SEARCH_MAX_PREFIXES', 0, 512),
      minPrefix: int('POSTERN_SEARCH_MIN_PREFIX', 1, 100),
      // Under the pool's statement timeout (30 s) and its wait for a connection (10 s).
      budgetMs: int('POSTERN_SEARCH_TIMEOUT_MS', 10, 10000),
    },
    send: {
      perHour: int('POSTERN_SEND_RATE_PER_HOUR', 1, 10_000_000),
      copyYieldMs: int('POSTERN_SENT_COPY_YIELD_MS', 0, 3_600_000),
      horizonMs: duration('POSTERN_SEND_HORIZON'),
    },
    ingress: {
      listen: get('POSTERN_LMTP_PORT') === '' ? null : { host: get('POSTERN_LMTP_HOST'), port: int('POSTERN_LMTP_PORT', 0, 65535) },
      dovecot: { host: get('POSTERN_DOVECOT_LMTP_HOST'), port: int('POSTERN_DOVECOT_LMTP_PORT', 1, 65535) },
      recipientDelimiter,
    },
    watch: {
      mode: watchMode === 'auto' ? (hints ? 'push' : 'notify') : (watchMode as Config['watch']['mode']),
      reason:
        watchMode !== 'auto'
          ? `POSTERN_WATCH=${watchMode}`
          : hints
            ? 'POSTERN_WATCH=auto and POSTERN_HINT_LISTEN is set: push hints from Dovecot'
            : 'POSTERN_WATCH=auto and POSTERN_HINT_LISTEN is not set: one NOTIFY connection per inbox (fine for tens of inboxes; docs/watch.md sets up push)',
      hints,
      sweepMs: int('POSTERN_WATCH_SWEEP_MS', 0, 86400000),
      sweepConcurrency: int('POSTERN_WATCH_SWEEP_CONCURRENCY', 1, 256),
      catalogPollMs: int('POSTERN_WATCH_CATALOG_POLL_MS', 0, 3600000),
      fillWaitMs: int('POSTERN_FILL_WAIT_MS', 0, 600000),
    },
    redisUrl: url('REDIS_URL', ['redis:', 'rediss:']),
    masterKey: get('POSTERN_MASTER_KEY') || null,
    tokenTtlSeconds: int('POSTERN_TOKEN_TTL'),
    sessionTtlSeconds: int('POSTERN_SESSION_TTL', 60),
    app: {
      origin: appOrigin(get('POSTERN_APP_ORIGIN')),
      inviteTtlSeconds: int('POSTERN_INVITE_TTL', 60),
      ceremoniesPerMinute: int('POSTERN_SIGN_IN_RATE_PER_MINUTE', 0, 1000000),
      reauthMaxAgeSeconds: int('POSTERN_REAUTH_MAX_AGE', 10, 3600),
    },
    events: { settleMs: int('POSTERN_EVENTS_SETTLE_MS', 0, 60000) },
    webhookAllow: cidrList('POSTERN_WEBHOOK_ALLOW', get('POSTERN_WEBHOOK_ALLOW')),
    webhookAllowHttpLoopback: bool('POSTERN_WEBHOOK_ALLOW_HTTP_LOOPBACK'),
    webhooks: webhookSettings(),
    stream: {
      heartbeatMs: int('POSTERN_STREAM_HEARTBEAT_MS', 10, 3600000),
      maxDurationMs: int('POSTERN_STREAM_MAX_MS', 100, 86400000),
      recheckMs: int('POSTERN_STREAM_RECHECK_MS', 10, 3600000),
      maxPerCredential: int('POSTERN_STREAM_MAX_PER_CREDENTIAL', 0, 1000000),
      maxPerProject: int('POSTERN_STREAM_MAX_PER_PROJECT', 0, 1000000),
    },
    rate: {
      requests: { perSecond: decimal('POSTERN_RATE_REQUESTS', 1_000_000), burst: int('POSTERN_RATE_BURST', 1, 1_000_000) },
      expensive: { perSecond: decimal('POSTERN_RATE_EXPENSIVE', 1_000_000), burst: int('POSTERN_RATE_EXPENSIVE_BURST', 1, 1_000_000) },
      refusalDelayMs: int('POSTERN_RATE_REFUSAL_DELAY_MS', 0, 60_000),
      perTurn: int('POSTERN_RATE_PER_TURN', 0, 100_000),
    },
    mcp: {
      // The SDK's own cap is 100: a batch it would refuse anyway is no bound to offer.
      batchMax: int('POSTERN_MCP_BATCH_MAX', 1, 100),
      batchConcurrency: int('POSTERN_MCP_BATCH_CONCURRENCY', 1, 100),
      batchBudgetMs: int('POSTERN_MCP_BATCH_BUDGET_MS', 100, 600000),
    },
    metrics: hostPort('POSTERN_METRICS_LISTEN'),
    logLevel,
  };
}

/** `a.b.c.d/n, x::/n, a.b.c.d`: an address alone is a block of one. */
export function cidrList(name: string, raw: string): Cidr[] {
  if (raw.trim() === '') return [];
  return raw.split(',').map((item) => {
    const text = item.trim();
    const m = /^([^/\s]+)(?:\/(\d{1,3}))?$/.exec(text);
    const version = m ? isIP(m[1]!) : 0;
    const max = version === 4 ? 32 : 128;
    const prefix = m?.[2] === undefined ? max : Number(m[2]);
    if (!m || version === 0 || prefix > max)
      throw new ConfigError(`${name} must be comma-separated networks such as 10.1.2.0/24 or fd00::/8, got "${text}"`);
    const family = version === 4 ? 'ipv4' : 'ipv6';
    return { network: m[1]!, prefix, family };
  });
}

/** WebAuthn works only in a secure context: https, or http on localhost. No path: it is an origin. */
function appOrigin(raw: string): string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ConfigError(`POSTERN_APP_ORIGIN must be an origin such as https://mail.example.org, got "${raw}"`);
  }
  const local = url.hostname === 'localhost' || url.hostname.endsWith('.localhost');
  if (
    !(url.protocol === 'https:' || (url.protocol === 'http:' && local)) ||
    (url.pathname !== '/' && url.pathname !== '') ||
    url.search ||
    url.hash ||
    url.username
  ) {
    throw new ConfigError(`POSTERN_APP_ORIGIN must be https://host[:port] (or http://localhost[:port]) with no path, got "${raw}"`);
  }
  if (/^[\d.]+$|^\[/.test(url.hostname))
    throw new ConfigError('POSTERN_APP_ORIGIN needs a host name: passkeys cannot be bound to an IP address');
  return url.origin;
}

/** The settings table as `postern serve --help` prints it. */
export function describeSettings(): string {
  const width = Math.max(...SETTINGS.map((s) => s.name.length));
  const value = (s: Setting): string => (s.requiredToServe ? 'required' : `default: ${s.default === '' ? 'none' : s.default}`);
  return SETTINGS.map((s) => `  ${s.name.padEnd(width)}  ${s.description} (${value(s)})`).join('\n');
}
