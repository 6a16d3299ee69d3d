// What Postern records for its metrics (docs/operations.md, "Metrics"): the small typed recorders
// (ImapMetrics, WatchMetrics, ...) the rest of Postern records through, and what is sampled at
// scrape time (MetricSamples), so no domain file imports prom-client. With POSTERN_METRICS_LISTEN
// unset, NO_METRICS stands in: every recorder does nothing, and no family exists. The Prometheus
// families behind them are lib/prometheus.ts, apart so that what only records (the staff commands,
// every domain module) never loads prom-client (docs/operations.md, "The postern command").
export type PoolWaitOutcome = 'acquired' | 'timed_out';
export type HintOutcome = 'taken' | 'unknown_user' | 'refused';
export type SyncOutcome = 'ok' | 'failed';
export type AppendOutcome = 'appended' | 'duplicate';
export type EventOrigin = 'builtin' | 'ext';
export type EventReadKind = 'page' | 'backfill';
/** accepted: the relay took it; refused: a 5xx; deferred: a 4xx or unreachable; unknown: its answer was lost; error: anything else. */
export type SendOutcome = 'accepted' | 'refused' | 'deferred' | 'unknown' | 'error';
/** delivered: a 2xx; retrying: failed, another attempt is scheduled; failed: given up; gone: 410, the endpoint disabled. */
export type WebhookOutcome = 'delivered' | 'retrying' | 'failed' | 'gone';
/** request: a credential's general budget; expensive: its budget for searches, downloads, tool calls; sign_in: an address's for the passkey ceremonies. */
export const RATE_KINDS = ['request', 'expensive', 'sign_in'] as const;
export type RateKind = (typeof RATE_KINDS)[number];

/** The IMAP connection pool (adapters/imap/pool.ts). */
export interface ImapMetrics {
  /** A task found no free connection and waited this long, for one or in vain. */
  waited(seconds: number, outcome: PoolWaitOutcome): void;
}

/** Watching every inbox (lib/mail/watch-all.ts). */
export interface WatchMetrics {
  hint(outcome: HintOutcome): void;
  /** A sweep this process ran: how long, and the changes it found that no push hint had announced. */
  swept(seconds: number, lostHints: number): void;
}

/** The index's sync passes (lib/mail/mirror.ts). */
export interface SyncMetrics {
  /** `lagSeconds`: from the first request for the pass (a hint, a watcher, a read) to its end. */
  pass(outcome: SyncOutcome, lagSeconds: number): void;
}

/** The event log (lib/events/log.ts). */
export interface EventMetrics {
  appended(origin: EventOrigin, outcome: AppendOutcome): void;
  read(kind: EventReadKind): void;
}

/** Sending (lib/send/service.ts). */
export interface SendMetrics {
  sent(outcome: SendOutcome): void;
  /** The relay's part of a send: from connecting to its answer (or failure). */
  relayed(seconds: number, outcome: SendOutcome): void;
}

/** The webhook dispatcher (lib/webhooks/dispatcher.ts). */
export interface WebhookMetrics {
  attempted(outcome: WebhookOutcome): void;
}

/** Request budgets (lib/rate.ts). */
export interface RateMetrics {
  /** A request (or MCP tool call) refused with 429 because a budget was spent. */
  refused(kind: RateKind): void;
}

/** Every recorder, as the server wires them. */
export interface Recorders {
  imap: ImapMetrics;
  watch: WatchMetrics;
  sync: SyncMetrics;
  events: EventMetrics;
  send: SendMetrics;
  webhooks: WebhookMetrics;
  rate: RateMetrics;
}

const nothing = (): void => undefined;

/** Metrics off: recorders that do nothing. */
export const NO_METRICS: Recorders = {
  imap: { waited: nothing },
  watch: { hint: nothing, swept: nothing },
  sync: { pass: nothing },
  events: { appended: nothing, read: nothing },
  send: { sent: nothing, relayed: nothing },
  webhooks: { attempted: nothing },
  rate: { refused: nothing },
};

/** What is read at scrape time from state already kept (or, for the store's two, one cheap query). */
export interface MetricSamples {
  imapConnections(): { busy: number; idle: number; opening: number; watching: number };
  /** Tasks waiting for an IMAP connection now. */
  imapWaiting(): number;
  watchedInboxes(): { mode: string; inboxes: number };
  /** Live subscriptions to the event log in this process (project streams, the webhook dispatcher). */
  eventLogReaders(): number;
  sseStreams(): { inbox: number; events: number };
  /** Messages of zero-access inboxes not sealed yet (the store's, so the same for every process). */
  unsealedMessages(): Promise<number>;
  /** Seconds the most overdue webhook delivery has waited past its due time (0: none due). */
  webhookQueueAgeSeconds(): Promise<number>;
  /** Whether this process serves the store reads it keeps now; null: it keeps none. */
  keptReadsServed(): boolean | null;
}

/** The route label of a request no route matched: unmatched paths could hold anything. */
export const UNMATCHED_ROUTE = 'unmatched';
