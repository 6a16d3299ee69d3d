// Standard Webhooks v1 (symmetric): what Postern sends so a receiver can check that a delivery
// came from it, unaltered, and is not an old one replayed. The signed content covers the id and
// the attempt's timestamp as well as the body, unlike body-only schemes that can be replayed.
import { createHmac, randomBytes } from 'node:crypto';
import { remembered } from '../remembered.ts';

const PREFIX = 'whsec_';

/** A new endpoint secret as receivers are given it: `whsec_` and 32 random bytes in base64. */
export function newWebhookSecret(): string {
  return webhookSecret(randomBytes(32));
}

/** Key bytes (as the store keeps them, sealed) written as the secret receivers are given. */
export function webhookSecret(key: Buffer): string {
  return PREFIX + key.toString('base64');
}

/** Secrets read before (an endpoint's secret signs every one of its deliveries). */
const keys = new Map<string, Buffer>();

/** The key bytes of a `whsec_` secret; throws on anything else, so a mangled secret never signs. */
export function secretKey(secret: string): Buffer {
  return remembered(keys, secret, readSecretKey);
}

function readSecretKey(secret: string): Buffer {
  if (!secret.startsWith(PREFIX)) throw new Error('a webhook secret starts with whsec_');
  const encoded = secret.slice(PREFIX.length);
  const key = Buffer.from(encoded, 'base64');
  // Buffer.from ignores bad characters; a round trip shows the secret was really base64.
  if (key.length < 24 || key.length > 64 || key.toString('base64').replace(/=+$/, '') !== encoded.replace(/=+$/, '')) {
    throw new Error('a webhook secret is whsec_ and 24 to 64 bytes in base64');
  }
  return key;
}

/** One `v1,<base64>` signature of `{id}.{timestamp}.{body}`. */
export function signatureOf(secret: string, id: string, timestampSeconds: number, body: string): string {
  // A dot in the id or a non-integer timestamp would let one signed content read as another.
  if (id.includes('.')) throw new Error('a webhook id must not contain "."');
  if (!Number.isSafeInteger(timestampSeconds) || timestampSeconds < 0) throw new Error('a webhook timestamp is whole seconds');
  const mac = createHmac('sha256', secretKey(secret)).update(`${id}.${timestampSeconds}.${body}`).digest('base64');
  return `v1,${mac}`;
}

export interface WebhookHeaders {
  'webhook-id': string;
  'webhook-timestamp': string;
  'webhook-signature': string;
}

/**
 * The three headers of one attempt. Several secrets (a rotation: the new and the old one) each
 * sign, space-separated, so a receiver holding either verifies.
 */
export function signedHeaders(secrets: readonly string[], id: string, body: string, at: Date = new Date()): WebhookHeaders {
  if (secrets.length === 0) throw new Error('a delivery needs at least one secret');
  const timestamp = Math.floor(at.getTime() / 1000);
  return {
    'webhook-id': id,
    'webhook-timestamp': String(timestamp),
    'webhook-signature': secrets.map((s) => signatureOf(s, id, timestamp, body)).join(' '),
  };
}

/** Everything a delivery attempt sends besides its body: the signature headers, the type, who sends. */
export function deliveryHeaders(secrets: readonly string[], id: string, body: string, at: Date = new Date()): Record<string, string> {
  const signed = signedHeaders(secrets, id, body, at);
  return {
    'webhook-id': signed['webhook-id'],
    'webhook-timestamp': signed['webhook-timestamp'],
    'webhook-signature': signed['webhook-signature'],
    'content-type': 'application/json',
    'user-agent': 'Postern-Webhooks/1',
  };
}

/** The body the Standard Webhooks spec recommends: the type, when the event happened (not when it is sent), its data. */
export interface WebhookPayload<T> {
  type: string;
  timestamp: string;
  data: T;
}

/** The body as sent and signed: one serialisation, so what is signed is byte for byte what is sent. */
export function webhookBody<T>(type: string, occurredAt: Date | string, data: T): string {
  return webhookBodyOf(type, occurredAt, JSON.stringify(data));
}

/** webhookBody with the data already serialised (JSON.stringify's output, as the event log keeps an event). */
export function webhookBodyOf(type: string, occurredAt: Date | string, dataJson: string): string {
  const timestamp = typeof occurredAt === 'string' ? occurredAt : occurredAt.toISOString();
  // What JSON.stringify({type, timestamp, data}) writes, in its key order.
  return `{"type":${JSON.stringify(type)},"timestamp":${JSON.stringify(timestamp)},"data":${dataJson}}`;
}
