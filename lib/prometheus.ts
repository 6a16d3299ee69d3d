// Prometheus metrics (docs/operations.md, "Metrics"): the one module that knows prom-client. It
// owns the registry and every family behind the recorders of lib/metrics.ts (which the rest of
// Postern records through) and reads what is sampled at scrape time (MetricSamples); nothing here
// knows a domain type.
//
// Names follow Prometheus conventions: base units (seconds), `_total` on counters, and labels
// with a fixed set of values (never an id). Several worker processes report as one: the primary
// asks each worker for its registry (prom-client's cluster messages) and aggregates them, summing
// by default; what every worker sees alike (the store's backlog, the inbox list) is `max`.
import cluster from 'node:cluster';
import { AggregatorRegistry, collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import {
  RATE_KINDS,
  type EventMetrics,
  type ImapMetrics,
  type MetricSamples,
  type RateMetrics,
  type Recorders,
  type SendMetrics,
  type SyncMetrics,
  type WatchMetrics,
  type WebhookMetrics,
} from './metrics.ts';

/** Request durations' buckets: from a cached read to a large send. */
const HTTP_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];
const WAIT_BUCKETS = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10];
const SWEEP_BUCKETS = [0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];
const LAG_BUCKETS = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
const RELAY_BUCKETS = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

export class Metrics implements Recorders {
  readonly registry = new Registry();
  readonly imap: ImapMetrics;
  readonly watch: WatchMetrics;
  readonly sync: SyncMetrics;
  readonly events: EventMetrics;
  readonly send: SendMetrics;
  readonly webhooks: WebhookMetrics;
  readonly rate: RateMetrics;
  private readonly httpDuration: Histogram<'method' | 'route' | 'status'>;
  private samples: MetricSamples | null = null;

  /** `keptReads`: the store keeps reads (PostgreSQL): its gauge exists (a gauge never set would read 0). */
  constructor(options: { keptReads: boolean } = { keptReads: false }) {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry });
    this.httpDuration = new Histogram({
      name: 'http_request_duration_seconds',
      help: 'HTTP requests on the public port by method, route template and status, and how long each took (an event stream: until it opened)',
      labelNames: ['method', 'route', 'status'],
      buckets: HTTP_BUCKETS,
      registers,
    });

    // 1 per process: summed over a cluster's workers, it says how many answered the scrape.
    new Gauge({
      name: 'postern_processes',
      help: 'Postern processes whose metrics this scrape holds (the workers, with POSTERN_WORKERS)',
      registers,
    }).set(1);

    const samples = () => this.samples;
    new Gauge({
      name: 'postern_imap_connections',
      help: 'IMAP connections to the mail server by state: busy with a task, idle in the pool, being opened, or held by a watcher',
      labelNames: ['state'],
      registers,
      collect() {
        const s = samples();
        if (!s) return;
        for (const [state, n] of Object.entries(s.imapConnections())) this.set({ state }, n);
      },
    });
    new Gauge({
      name: 'postern_imap_pool_waiting',
      help: 'Tasks waiting for a free IMAP connection now',
      registers,
      collect() {
        const s = samples();
        if (s) this.set(s.imapWaiting());
      },
    });
    const poolWait = new Histogram({
      name: 'postern_imap_pool_wait_seconds',
      help: 'Tasks that found no free IMAP connection and waited, by outcome (acquired, or timed_out: answered 503)',
      labelNames: ['outcome'],
      buckets: WAIT_BUCKETS,
      registers,
    });
    this.imap = { waited: (seconds, outcome) => poolWait.observe({ outcome }, seconds) };

    new Gauge({
      name: 'postern_watched_inboxes',
      help: 'Inboxes watched without a stream, by watch mode (push, notify, off)',
      labelNames: ['mode'],
      // Every process knows every inbox: the workers' counts are one count.
      aggregator: 'max',
      registers,
      collect() {
        const s = samples();
        if (!s) return;
        const { mode, inboxes } = s.watchedInboxes();
        this.set({ mode }, inboxes);
      },
    });
    const hints = new Counter({
      name: 'postern_push_hints_total',
      help: "Dovecot push hints received, by outcome (taken, unknown_user: not an inbox's, refused: wrong secret)",
      labelNames: ['outcome'],
      registers,
    });
    const sweepDuration = new Histogram({
      name: 'postern_sweep_duration_seconds',
      help: 'Sweeps of every inbox this process ran, and how long each took',
      buckets: SWEEP_BUCKETS,
      registers,
    });
    const lostHints = new Counter({
      name: 'postern_sweep_lost_hints_total',
      help: 'Inboxes whose changes a sweep found that no push hint had announced (lost hints)',
      registers,
    });
    this.watch = {
      hint: (outcome) => hints.inc({ outcome }),
      swept: (seconds, lost) => {
        sweepDuration.observe(seconds);
        if (lost > 0) lostHints.inc(lost);
      },
    };

    const passes = new Counter({
      name: 'postern_sync_passes_total',
      help: 'Index sync passes, by outcome',
      labelNames: ['outcome'],
      registers,
    });
    const lag = new Histogram({
      name: 'postern_index_lag_seconds',
      help: 'From the first request for a sync pass (a push hint, a watcher, a read) to the index having it',
      buckets: LAG_BUCKETS,
      registers,
    });
    this.sync = {
      pass: (outcome, lagSeconds) => {
        passes.inc({ outcome });
        if (outcome === 'ok') lag.observe(lagSeconds);
      },
    };

    const appends = new Counter({
      name: 'postern_event_appends_total',
      help: "Events appended to the log, by origin (builtin: Postern's own; ext: a project's) and outcome (duplicate: an idempotency key already used)",
      labelNames: ['origin', 'outcome'],
      registers,
    });
    const reads = new Counter({
      name: 'postern_event_reads_total',
      help: 'Reads of the event log, by kind (page: GET /events; backfill: a stream or webhook catching up)',
      labelNames: ['kind'],
      registers,
    });
    this.events = { appended: (origin, outcome) => appends.inc({ origin, outcome }), read: (kind) => reads.inc({ kind }) };
    new Gauge({
      name: 'postern_event_log_readers',
      help: 'Live readers of the event log (project event streams and the webhook dispatcher)',
      registers,
      collect() {
        const s = samples();
        if (s) this.set(s.eventLogReaders());
      },
    });
    new Gauge({
      name: 'postern_sse_streams',
      help: 'Open Server-Sent Events streams, by kind (inbox: an inbox change stream; events: a project event stream)',
      labelNames: ['kind'],
      registers,
      collect() {
        const s = samples();
        if (!s) return;
        for (const [kind, n] of Object.entries(s.sseStreams())) this.set({ kind }, n);
      },
    });

    const sends = new Counter({
      name: 'postern_sends_total',
      help: 'Send requests that reached the relay, by outcome',
      labelNames: ['outcome'],
      registers,
    });
    const relay = new Histogram({
      name: 'postern_relay_duration_seconds',
      help: "The relay's part of a send (Postfix submission), by outcome",
      labelNames: ['outcome'],
      buckets: RELAY_BUCKETS,
      registers,
    });
    this.send = { sent: (outcome) => sends.inc({ outcome }), relayed: (seconds, outcome) => relay.observe({ outcome }, seconds) };

    new Gauge({
      name: 'postern_unsealed_messages',
      help: 'Messages in zero-access inboxes still waiting to be sealed (plaintext at rest)',
      aggregator: 'max',
      registers,
      async collect() {
        const s = samples();
        if (s) this.set(await s.unsealedMessages());
      },
    });
    const deliveries = new Counter({
      name: 'postern_webhook_deliveries_total',
      help: 'Webhook delivery attempts, by outcome',
      labelNames: ['outcome'],
      registers,
    });
    this.webhooks = { attempted: (outcome) => deliveries.inc({ outcome }) };
    new Gauge({
      name: 'postern_webhook_queue_age_seconds',
      help: 'How long the most overdue webhook delivery has waited past its due time (0: none waiting)',
      aggregator: 'max',
      registers,
      async collect() {
        const s = samples();
        if (s) this.set(await s.webhookQueueAgeSeconds());
      },
    });

    const refusals = new Counter({
      name: 'postern_rate_limited_total',
      help: "Requests refused with 429 because a budget was spent, by kind (request: a credential's general budget; expensive: its budget for searches, message downloads and MCP tool calls; sign_in: an address's passkey ceremonies)",
      labelNames: ['kind'],
      registers,
    });
    // Each kind at 0 from the start, so an alert on its increase has a series before the first refusal.
    for (const kind of RATE_KINDS) refusals.inc({ kind }, 0);
    this.rate = { refused: (kind) => refusals.inc({ kind }) };

    if (options.keptReads) {
      new Gauge({
        name: 'postern_store_kept_reads_served',
        help: 'PostgreSQL: 1 while this process serves the tokens, grants and inboxes it kept (its listening connection heard a heartbeat lately), 0 while every read goes to the database; absent when nothing is kept',
        // One worker not hearing is what matters.
        aggregator: 'min',
        registers,
        collect() {
          const served = samples()?.keptReadsServed() ?? null;
          if (served !== null) this.set(served ? 1 : 0);
        },
      });
    }

    // A cluster worker answers its primary's requests with this registry.
    if (cluster.isWorker) {
      new AggregatorRegistry();
      AggregatorRegistry.setRegistries([this.registry]);
    }
  }

  /** What the gauges read at scrape time (set once the parts they read exist). */
  sample(samples: MetricSamples): void {
    this.samples = samples;
  }

  /** One request served on the public port; `route` is the router's template, or UNMATCHED_ROUTE (lib/metrics.ts). */
  request(method: string, route: string, status: number, seconds: number): void {
    this.httpDuration.observe({ method, route, status: String(status) }, seconds);
  }

  /** The exposition text of this process. */
  text(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}

/** The primary of a cluster: every worker's registry, aggregated into one exposition. */
export function clusterMetrics(): { text: () => Promise<string>; contentType: string } {
  const aggregator = new AggregatorRegistry();
  return { text: () => aggregator.clusterMetrics(), contentType: aggregator.contentType };
}
