// Records for the unit tests of the dispatcher's parts (test/webhooks/webhook-dispatcher-parts.test.ts): no store, no mail server.
import { pino } from 'pino';
import type { DeliveryRecord, WebhookEndpointRecord } from '../../lib/webhooks/ports.ts';

export const silent = pino({ level: 'silent' });

export function endpointRecord(over: Partial<WebhookEndpointRecord> = {}): WebhookEndpointRecord {
  return {
    id: 'whk_a',
    projectId: 'prj_a',
    tokenId: 'tok_a',
    url: 'https://receiver.example/hook',
    types: null,
    inboxes: null,
    description: null,
    secretSealed: Buffer.from('sealed'),
    previousSecretSealed: null,
    previousExpiresAt: null,
    disabledAt: null,
    disabledReason: null,
    disabledBy: null,
    position: 0,
    failingSince: null,
    createdAt: 1,
    updatedAt: 1,
    ...over,
  };
}

export function deliveryRecord(over: Partial<DeliveryRecord> = {}): DeliveryRecord {
  return {
    eventId: 'evt_1',
    position: 1,
    type: 'message.added',
    endpointId: 'whk_a',
    projectId: 'prj_a',
    state: 'pending',
    attempts: 0,
    nextAttemptAt: 1000,
    lastAttemptAt: null,
    lastStatus: null,
    lastError: null,
    lastMs: null,
    createdAt: 1000,
    updatedAt: 1000,
    ...over,
  };
}

/** A clock the test moves. */
export function clock(start = 1_700_000_000_000): { now: () => number; set: (t: number) => void; add: (ms: number) => void } {
  let t = start;
  return { now: () => t, set: (v) => (t = v), add: (ms) => (t += ms) };
}
