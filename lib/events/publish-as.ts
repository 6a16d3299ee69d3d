// Publishing for a caller, as POST /events and the publish_event tool both do (docs/api.md, "Events"): the
// data size rule, the inbox the caller must be able to read, then the log, which answers a
// repeated Idempotency-Key with the first event.
import type { Access, Principal } from '../auth/access.ts';
import { isDomainError, tooLarge } from '../errors.ts';
import { MAX_DATA_BYTES, type EventLog, type PublishResult } from './log.ts';
import type { EventData } from './types.ts';

/** An event as a caller asks for it, already validated against NewEvent. */
export interface PublishRequest {
  type: string;
  subject?: string;
  inbox?: string;
  data?: EventData;
}

export async function publishAs(
  events: EventLog,
  access: Access,
  p: Principal,
  body: PublishRequest,
  idempotencyKey?: string,
): Promise<PublishResult> {
  if (body.data !== undefined && Buffer.byteLength(JSON.stringify(body.data)) > MAX_DATA_BYTES) {
    throw tooLarge(`data is over ${MAX_DATA_BYTES} bytes (measured as compact JSON)`);
  }
  if (body.inbox !== undefined) await access.inboxAccess(p, body.inbox, 'messages:read');
  return events.publish({
    projectId: p.projectId,
    actor: p.actor,
    type: body.type,
    ...(body.subject !== undefined ? { subject: body.subject } : {}),
    ...(body.inbox !== undefined ? { inboxId: body.inbox } : {}),
    ...(body.data !== undefined ? { data: body.data } : {}),
    ...(idempotencyKey ? { idempotencyKey } : {}),
  });
}

/**
 * docs/api.md, "Events": a key used within 24 hours returns the first event, whatever the new request holds.
 * A request that is going to be stored learns that from the append itself (the store answers a
 * taken key with its event), so only one `publish` refuses asks for the key, a round trip to the
 * store fewer for every other.
 */
export async function publishKeyed(
  events: EventLog,
  projectId: string,
  idempotencyKey: string | undefined,
  publish: () => Promise<PublishResult>,
): Promise<PublishResult> {
  try {
    return await publish();
  } catch (err) {
    if (!idempotencyKey || !isDomainError(err)) throw err;
    const first = await events.keyed(projectId, idempotencyKey);
    if (!first) throw err;
    return { duplicate: true, id: first.id };
  }
}
