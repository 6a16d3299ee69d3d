// Who sees which events (docs/api.md, "Events"), as one filter used by paged reads (in SQL, by the store) and
// by live streams (in memory, by `matches`), so the two can never disagree.
import type { Access, Principal } from '../auth/access.ts';
import { invalid, forbidden } from '../errors.ts';
import { isId } from '../ids.ts';
import { Cursors } from './cursor.ts';
import type { EventLog } from './log.ts';
import type { StoredEvent, Visibility } from './types.ts';

const MAX_INBOX_FILTER = 100;

/** GET /events query parameters, as validated by schemas/events.json#/$defs/EventsQuery. */
export interface EventsQuery {
  after?: string;
  /** Newest first, below this cursor or event id (docs/events.md, "Reading backwards"). */
  before?: string;
  /** `desc`: newest first (from the newest event when `before` is not given). */
  order?: 'asc' | 'desc';
  types?: string;
  inboxes?: string;
  audit?: boolean;
  limit: number;
}

export interface EventFilter {
  projectId: string;
  /** null: every inbox and project-level events; otherwise only events of these inboxes. */
  inboxes: readonly string[] | null;
  /** Inboxes the caller may use; an event naming any other inbox is never shown. */
  allowedInboxes: readonly string[];
  visibilities: readonly Visibility[];
  /** null: all types; otherwise exact names and `prefix.*` patterns. */
  types: readonly string[] | null;
  /** Web sessions see events without who acted (`actor` emptied). */
  redactActor: boolean;
}

/** A compiled form of the filter for the hot path of live delivery. */
export function compileFilter(f: EventFilter): (e: StoredEvent) => boolean {
  const allowed = new Set(f.allowedInboxes);
  const only = f.inboxes ? new Set(f.inboxes) : null;
  const vis = new Set(f.visibilities);
  const exact = f.types ? new Set(f.types.filter((t) => !t.endsWith('*'))) : null;
  const prefixes = f.types ? f.types.filter((t) => t.endsWith('*')).map((t) => t.slice(0, -1)) : [];
  return (e) => {
    if (e.projectId !== f.projectId || !vis.has(e.visibility)) return false;
    if (e.inboxId === null) {
      if (only) return false;
    } else if (!allowed.has(e.inboxId) || (only && !only.has(e.inboxId))) {
      return false;
    }
    if (exact && !exact.has(e.type) && !prefixes.some((p) => e.type.startsWith(p))) return false;
    return true;
  };
}

/** Empties `actor` in an event's JSON (the store writes `actor` before any caller-supplied text). */
export function redactActor(json: string): string {
  return json.replace(/"actor":"[^"]*"/, '"actor":""');
}

/** The `types` parameter: comma-separated names or `prefix.*`; null when it is not well formed. */
export function parseTypes(raw: string): string[] | null {
  const items = raw
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
  if (items.length === 0 || items.length > 50) return null;
  const ok = /^(?:[a-z][a-z0-9_]*)(?:\.[a-z][a-z0-9_]*)*(?:\.\*)?$/;
  return items.every((t) => ok.test(t) || t === '*') ? [...new Set(items)] : null;
}

/** Who sees what on GET /events (docs/api.md, "Events"); 400/403/404 for a request that cannot be served. */
export async function filterFor(access: Access, p: Principal, q: EventsQuery): Promise<EventFilter> {
  const session = p.kind === 'session';
  if (q.audit === true && !access.hasScope(p, 'audit:read')) throw forbidden('audit=true needs the audit:read scope');
  if (session && q.inboxes === undefined) throw invalid('the web app must name its inboxes: add ?inboxes=ibx_…');
  let types: string[] | null = null;
  if (q.types !== undefined) {
    types = parseTypes(q.types);
    if (!types) throw invalid('types must be comma-separated event types or prefixes ending in .* (for example message.*)');
  }
  let named: string[] | null = null;
  let allowed: string[];
  if (q.inboxes !== undefined) {
    named = [...new Set(q.inboxes.split(',').map((s) => s.trim()))];
    if (named.length > MAX_INBOX_FILTER) throw invalid(`inboxes names at most ${MAX_INBOX_FILTER} inboxes`);
    // Each must be one the caller may use: 404 otherwise, whether it exists or not.
    for (const id of named) await access.inboxAccess(p, id, 'messages:read');
    allowed = named;
  } else {
    allowed = (await access.grantedInboxes(p)).map((g) => g.inbox.id);
  }
  const visibilities: Visibility[] = ['inbox'];
  if (access.hasScope(p, 'project:read')) visibilities.push('project');
  if (q.audit === true) visibilities.push('audit');
  return { projectId: p.projectId, inboxes: named, allowedInboxes: allowed, visibilities, types, redactActor: session };
}

/** Where a read starts: after (or `before`) a cursor or an event id of the caller's project; null when none was given. */
export async function startPosition(
  events: EventLog,
  p: Principal,
  raw: string | undefined,
  cursors: Cursors,
  param: 'after' | 'before' = 'after',
): Promise<number | null> {
  if (raw === undefined || raw === '') return null;
  const position = cursors.decode(p.projectId, raw);
  if (position !== null) return position;
  if (isId('evt', raw)) {
    const found = await events.positionOf(p.projectId, raw);
    if (found === null) throw invalid(`${param} names an event that is not in this project`);
    return found;
  }
  // Old cursors carried the global position in clear: honouring them would let anyone probe it.
  if (Cursors.isLegacy(raw)) {
    throw invalid(
      'this cursor is from an earlier version of Postern and is no longer accepted: resume with the id of the last event you processed (after=evt_…)',
    );
  }
  // Another project's cursor gets the same answer as garbage: it tells nothing.
  throw invalid(
    param === 'after'
      ? 'after (or Last-Event-ID) must be a cursor of this project from this API, or an event id'
      : 'before must be a cursor of this project from this API, or an event id',
  );
}
