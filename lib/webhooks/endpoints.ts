// Webhook endpoints (docs/webhooks.md): where a project's events are sent, managed by
// tokens with `webhooks:write`. An endpoint receives what the token that created it may read
// (events:read semantics, re-checked at delivery by the dispatcher), so only that token sees and
// changes it: another token of the project, even one of the same member, could otherwise point
// a wider token's events at a URL of its own. Secrets are shown once and kept sealed with the
// service master key.
import { randomBytes } from 'node:crypto';
import { isIP } from 'node:net';
import type * as Wire from '../../schemas/wire.ts';
import type { Access, Principal } from '../auth/access.ts';
import type { MasterKey } from '../crypto/master-key.ts';
import { conflict, forbidden, invalid, isDomainError, notFound, rateLimited, unprocessable } from '../errors.ts';
import { RateBuckets } from '../rate.ts';
import { builtinType } from '../events/catalog.ts';
import { parseTypes } from '../events/query.ts';
import { isId, newId } from '../ids.ts';
import { deliveryHeaders, webhookBody, webhookSecret } from './signature.ts';
import type { Cursors } from '../events/cursor.ts';
import type { DeliveryRecord, Poster, WebhookEndpointRecord, WebhookStore } from './ports.ts';

/** Standard Webhooks' recommended key size (it allows 24 to 64 bytes). */
const SECRET_BYTES = 32;
/** After a rotation the previous secret signs too (both signatures sent) for this long. */
export const ROTATION_OVERLAP_MS = 24 * 60 * 60 * 1000;
/** Endpoints a project may have: each one is a stream of deliveries to keep up. */
export const MAX_ENDPOINTS_PER_PROJECT = 100;

export interface WebhookEndpointsOptions {
  store: WebhookStore;
  access: Access;
  masterKey: MasterKey;
  /** The event log's last position: a new endpoint receives the events recorded after it. */
  head: () => Promise<number>;
  /** POSTERN_WEBHOOK_ALLOW_HTTP_LOOPBACK: http:// to a loopback address, for development. */
  allowHttpLoopback: boolean;
  /** The event log's cursors: deliveries show them, a replay starts from one. */
  cursors: () => Promise<Cursors>;
  /** How test sends reach the receiver (the dispatcher's way). */
  post: Poster;
  /** An endpoint was made, changed, rotated or replayed: this process's dispatcher reads it again before the answer. */
  onChange?: (id: string) => Promise<void>;
  /** An endpoint was deleted: this process's dispatcher stops its attempts before the answer. */
  onDelete?: (id: string) => void;
  /** Test sends one endpoint may make per minute, in this process (POSTERN_WEBHOOK_TESTS_PER_MINUTE). */
  testsPerMinute: number;
  now?: () => number;
}

/** GET /webhooks/{id}/deliveries query, as validated by schemas/webhooks.json#/$defs/WebhookDeliveriesQuery (limit defaulted). */
export interface DeliveriesQuery {
  before?: string;
  limit: number;
}

/** Bound to the row, so a sealed secret cannot be moved onto another endpoint. */
const sealContext = (id: string) => `webhook-secret ${id}`;

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

function isLoopback(hostname: string): boolean {
  // URL keeps IPv6 literals in brackets, and has already normalized IPv4 forms (0x7f.1 → 127.0.0.1).
  const host = hostname.startsWith('[') ? hostname.slice(1, -1) : hostname;
  if (host === 'localhost') return true;
  if (isIP(host) === 4) return host.startsWith('127.');
  return host === '::1';
}

export class WebhookEndpoints {
  private readonly now: () => number;
  /** Test sends per endpoint: each one is a request to a URL of the caller's choosing. */
  private readonly tests: RateBuckets;

  constructor(private readonly o: WebhookEndpointsOptions) {
    this.now = o.now ?? Date.now;
    this.tests = new RateBuckets({ perSecond: o.testsPerMinute / 60, burst: o.testsPerMinute }, { now: this.now });
  }

  async create(p: Principal, input: Wire.NewWebhook): Promise<Wire.WebhookCreated> {
    // What an endpoint receives is what its token may read on GET /events.
    if (!this.o.access.hasScope(p, 'events:read'))
      throw forbidden('a webhook receives what its token may read: the token needs events:read as well as webhooks:write');
    const url = this.checkUrl(input.url);
    const types = this.checkTypes(input.types ?? null);
    const inboxes = await this.checkInboxes(p, input.inboxes ?? null);
    if ((await this.o.store.list(p.projectId)).length >= MAX_ENDPOINTS_PER_PROJECT) {
      throw unprocessable(`a project has at most ${MAX_ENDPOINTS_PER_PROJECT} webhook endpoints`);
    }
    const id = newId('whk');
    const key = randomBytes(SECRET_BYTES);
    const at = this.now();
    const record: WebhookEndpointRecord = {
      id,
      projectId: p.projectId,
      tokenId: p.credentialId,
      url,
      types,
      inboxes,
      description: input.description ?? null,
      secretSealed: this.o.masterKey.seal(key, sealContext(id)),
      previousSecretSealed: null,
      previousExpiresAt: null,
      disabledAt: null,
      disabledReason: null,
      disabledBy: null,
      position: await this.o.head(),
      failingSince: null,
      createdAt: at,
      updatedAt: at,
    };
    await this.o.store.create(record);
    await this.o.onChange?.(id);
    return { ...this.wire(record), secret: webhookSecret(key) };
  }

  async list(p: Principal): Promise<Wire.WebhookList> {
    const all = await this.o.store.list(p.projectId);
    return { webhooks: all.filter((e) => e.tokenId === p.credentialId).map((e) => this.wire(e)) };
  }

  async get(p: Principal, id: string): Promise<Wire.Webhook> {
    return this.wire(await this.owned(p, id));
  }

  async update(p: Principal, id: string, change: Wire.WebhookChange): Promise<Wire.Webhook> {
    let e = await this.owned(p, id);
    const at = this.now();
    // Everything is checked before anything is written.
    const url = change.url !== undefined ? this.checkUrl(change.url) : e.url;
    const types = change.types !== undefined ? this.checkTypes(change.types) : e.types;
    const inboxes = change.inboxes !== undefined ? await this.checkInboxes(p, change.inboxes) : e.inboxes;
    if (change.enabled === true && e.disabledBy === 'staff') {
      throw conflict("this webhook was disabled by the service's staff; its owner cannot enable it again (ask the service's operators)");
    }
    const edited =
      change.url !== undefined || change.types !== undefined || change.inboxes !== undefined || change.description !== undefined;
    if (edited) {
      const description = change.description !== undefined ? change.description : e.description;
      const updated = await this.o.store.update(p.projectId, id, { url, types, inboxes, description, updatedAt: at });
      if (!updated) throw notFound('webhook not found');
      e = updated;
    }
    // Disabling keeps the time and reason of an endpoint already disabled (by the dispatcher, say).
    if (change.enabled !== undefined && change.enabled !== (e.disabledAt === null)) {
      const updated = await this.o.store.setDisabled(
        p.projectId,
        id,
        change.enabled ? null : { at, by: 'owner', reason: 'disabled through the API' },
        at,
      );
      if (!updated) throw notFound('webhook not found');
      e = updated;
    }
    await this.o.onChange?.(id);
    return this.wire(e);
  }

  async delete(p: Principal, id: string): Promise<void> {
    await this.owned(p, id);
    if (!(await this.o.store.delete(p.projectId, id))) throw notFound('webhook not found');
    // Attempts under way are abandoned and none waiting is started (other processes: within a poll).
    this.o.onDelete?.(id);
  }

  /** A new secret; the current one keeps signing (both signatures sent) for ROTATION_OVERLAP_MS. */
  async rotateSecret(p: Principal, id: string): Promise<Wire.WebhookSecret> {
    await this.owned(p, id);
    const key = randomBytes(SECRET_BYTES);
    const at = this.now();
    const until = at + ROTATION_OVERLAP_MS;
    const rotated = await this.o.store.rotateSecret(p.projectId, id, this.o.masterKey.seal(key, sealContext(id)), until, at);
    if (!rotated) throw notFound('webhook not found');
    await this.o.onChange?.(id);
    return { secret: webhookSecret(key), previousSecretExpiresAt: new Date(until).toISOString() };
  }

  /**
   * The secrets that sign a delivery now, newest first, as `whsec_…` text (what signedHeaders in
   * ./signature.ts takes): the current one, and the previous one until its overlap ends.
   */
  signingSecrets(e: WebhookEndpointRecord, at = this.now()): string[] {
    const out = [webhookSecret(this.o.masterKey.open(e.secretSealed, sealContext(e.id)))];
    if (e.previousSecretSealed && e.previousExpiresAt !== null && e.previousExpiresAt > at) {
      out.push(webhookSecret(this.o.masterKey.open(e.previousSecretSealed, sealContext(e.id))));
    }
    return out;
  }

  /** The endpoint's deliveries, newest event first, paged with `before` (a `next` from the page before). */
  async deliveries(p: Principal, id: string, q: DeliveriesQuery): Promise<Wire.WebhookDeliveryList> {
    const e = await this.owned(p, id);
    const cursors = await this.o.cursors();
    let before: number | null = null;
    if (q.before !== undefined) {
      before = cursors.decode(p.projectId, q.before);
      if (before === null) throw invalid('before is not a cursor of this project (use a next from a deliveries page)');
    }
    const rows = await this.o.store.deliveries(p.projectId, e.id, before, q.limit + 1);
    const page = rows.slice(0, q.limit);
    const more = rows.length > q.limit;
    return {
      deliveries: page.map((d) => this.wireDelivery(d, cursors)),
      next: more ? cursors.encode(p.projectId, page[page.length - 1]!.position) : null,
    };
  }

  /** Sends again every event after the cursor that the endpoint would receive (its position goes back there). */
  async replay(p: Principal, id: string, after: string): Promise<Wire.WebhookReplayStarted> {
    const e = await this.owned(p, id);
    const position = (await this.o.cursors()).decode(p.projectId, after);
    if (position === null) throw invalid('after is not a cursor of this project (take one from GET /events or a delivered event)');
    if (!(await this.o.store.rewind(p.projectId, e.id, position, this.now()))) throw notFound('webhook not found');
    await this.o.onChange?.(e.id);
    return { after };
  }

  /**
   * One signed `webhook.test` POST to the endpoint now (enabled or not), outside the log; what it
   * got. At most testsPerMinute per endpoint: each is a request to a URL of the caller's choosing.
   */
  async test(p: Principal, id: string): Promise<Wire.WebhookTestResult> {
    const e = await this.owned(p, id);
    const retryAfter = this.tests.take(e.id);
    if (retryAfter > 0) throw rateLimited(`at most ${this.o.testsPerMinute} test sends per webhook a minute; try again later`, retryAfter);
    const eventId = newId('evt');
    const at = new Date(this.now());
    const body = webhookBody('webhook.test', at, { id: eventId, type: 'webhook.test', time: at.toISOString(), webhookId: e.id });
    const headers = deliveryHeaders(this.signingSecrets(e), eventId, body, at);
    const r = await this.o.post(e.url, headers, body, undefined, e.projectId);
    if (!r.ok) return { delivered: false, status: null, error: r.error, durationMs: r.ms };
    const delivered = r.status >= 200 && r.status < 300;
    return { delivered, status: r.status, error: delivered ? null : `the receiver answered HTTP ${r.status}`, durationMs: r.ms };
  }

  private wireDelivery(d: DeliveryRecord, cursors: Cursors): Wire.WebhookDelivery {
    return {
      eventId: d.eventId,
      type: d.type,
      cursor: cursors.encode(d.projectId, d.position),
      state: d.state,
      attempts: d.attempts,
      lastAttemptAt: iso(d.lastAttemptAt),
      lastStatus: d.lastStatus,
      lastError: d.lastError,
      lastDurationMs: d.lastMs,
      nextAttemptAt: d.state === 'pending' ? iso(d.nextAttemptAt) : null,
      createdAt: iso(d.createdAt)!,
    };
  }

  /** The caller's endpoint: 404 for one that does not exist, is another project's or another token's. */
  private async owned(p: Principal, id: string): Promise<WebhookEndpointRecord> {
    const e = isId('whk', id) ? await this.o.store.get(p.projectId, id) : null;
    if (!e || e.tokenId !== p.credentialId) throw notFound('webhook not found');
    return e;
  }

  private checkUrl(raw: string): string {
    let url: URL;
    try {
      url = new URL(raw);
    } catch {
      throw invalid('url must be an absolute https:// URL');
    }
    if (url.username || url.password) throw unprocessable('url must not hold credentials: the signature authenticates deliveries');
    if (url.protocol === 'https:') return url.toString();
    if (url.protocol === 'http:') {
      if (!this.o.allowHttpLoopback)
        throw unprocessable(
          'url must be https:// (http:// to a loopback address needs POSTERN_WEBHOOK_ALLOW_HTTP_LOOPBACK=1, for development)',
        );
      if (!isLoopback(url.hostname))
        throw unprocessable('http:// is accepted only to a loopback address (localhost, 127.0.0.0/8, ::1); use https://');
      return url.toString();
    }
    throw unprocessable('url must be https://');
  }

  /** GET /events' filter syntax; unknown well-formed names are fine (ext types may come later), audit-only ones are not. */
  private checkTypes(types: readonly string[] | null): string[] | null {
    if (types === null) return null;
    const parsed = types.some((t) => t.includes(',')) ? null : parseTypes(types.join(','));
    if (!parsed) throw invalid('types must be event types or prefixes ending in .* (for example message.*)');
    const audit = parsed.find((t) => builtinType(t)?.visibility === 'audit');
    if (audit) throw unprocessable(`${audit} is audit-only: it cannot trigger webhooks`);
    return parsed;
  }

  /** Each inbox must be one the caller may read in its project (whether it exists or not, the same answer). */
  private async checkInboxes(p: Principal, inboxes: readonly string[] | null): Promise<string[] | null> {
    if (inboxes === null) return null;
    const out = [...new Set(inboxes)];
    for (const id of out) {
      try {
        await this.o.access.inboxAccess(p, id, 'messages:read');
      } catch (err) {
        if (isDomainError(err) && (err.kind === 'not-found' || err.kind === 'forbidden'))
          throw unprocessable(`inbox ${id} is not one this token may read`);
        throw err;
      }
    }
    return out;
  }

  private wire(e: WebhookEndpointRecord): Wire.Webhook {
    const previousLive = e.previousExpiresAt !== null && e.previousExpiresAt > this.now();
    return {
      id: e.id,
      url: e.url,
      types: e.types,
      inboxes: e.inboxes,
      description: e.description,
      enabled: e.disabledAt === null,
      disabledAt: iso(e.disabledAt),
      disabledReason: e.disabledReason,
      previousSecretExpiresAt: previousLive ? iso(e.previousExpiresAt) : null,
      createdAt: iso(e.createdAt)!,
      updatedAt: iso(e.updatedAt)!,
    };
  }
}
