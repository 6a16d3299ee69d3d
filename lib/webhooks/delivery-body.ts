// A delivery's body as sent (docs/webhooks.md): `{type, timestamp, data}`, data being the event
// as GET /events serves it plus its cursor.
import type { Cursors } from '../events/cursor.ts';
import { webhookBody, webhookBodyOf } from './signature.ts';

/**
 * The top-level `time` of an event as the log writes it: its first `"time":"` is that key (it comes
 * before anything nested, and a quote inside a string is escaped), and an ISO time has no escapes.
 */
export function leadingTime(json: string): string | null {
  const at = json.indexOf('"time":"');
  if (at < 0) return null;
  // Only a key before anything nested (else: the long way).
  const brace = json.indexOf('{', 1);
  const bracket = json.indexOf('[');
  if ((brace >= 0 && brace < at) || (bracket >= 0 && bracket < at)) return null;
  const end = json.indexOf('"', at + 8);
  const time = json.slice(at + 8, end);
  return end > 0 && !time.includes('\\') ? time : null;
}

/** The delivery's body: the event's JSON from the log (`json`) with its cursor; `now` dates an event without a time. */
export function deliveryBody(
  cursors: Pick<Cursors, 'encode'>,
  d: { projectId: string; position: number; type: string },
  json: string,
  now: number,
): string {
  const cursor = cursors.encode(d.projectId, d.position);
  // The log's JSON is JSON.stringify's, `time` among its first keys (lib/events/log.ts): read and
  // extended as text, not parsed and written again. Anything else takes the long way.
  const time = leadingTime(json);
  if (time !== null && json.endsWith('}') && !json.includes('"cursor":'))
    return webhookBodyOf(d.type, time, `${json.slice(0, -1)},"cursor":${JSON.stringify(cursor)}}`);
  const event = JSON.parse(json) as { time?: unknown };
  return webhookBody(d.type, typeof event.time === 'string' ? event.time : new Date(now).toISOString(), { ...event, cursor });
}
