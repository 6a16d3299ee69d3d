// Sends that wait on the server (docs/sending.md, "Send later" and "The outbox"): every send from
// the app carries an undo hold, so closing the tab during it still sends, and Undo takes it back
// from the outbox as a draft. "Send later" is the same send with a send time.
import type { SendRequest, SendResult } from '../../schemas/wire.ts';
import { api } from '../api.ts';

/** The undo hold every send carries (the server allows 0 to 30 s). */
export const UNDO_SECONDS = 10;

/** POST /send's 202: the send waits in the outbox. */
export interface QueuedSend {
  sent: false;
  outboxId: string;
  messageId?: string;
  state: 'held' | 'scheduled';
  sendAt?: string;
  holdUntil?: string;
}

/** One outbox row (GET …/outbox/{id}, send.json OutboxEntry), as far as the app reads it. */
export interface OutboxSend {
  id: string;
  state: 'held' | 'scheduled' | 'sending' | 'sent' | 'unknown' | 'failed' | 'cancelled';
  from: string;
  recipients: number;
  createdAt: string;
  sendAt: string | null;
  holdUntil: string | null;
  draftId: string | null;
  reason: string | null;
}

/** What waits (held, scheduled, sending), newest first: GET …/outbox. */
export const waitingSends = async (inboxId: string) => (await api<{ sends: OutboxSend[] }>('GET', `/inboxes/${inboxId}/outbox`)).sends;

/** A scheduled send's new time (PATCH …/outbox/{id}); a send no longer scheduled is a 409. */
export const reschedule = (inboxId: string, outboxId: string, sendAt: Date) =>
  api<OutboxSend>('PATCH', `/inboxes/${inboxId}/outbox/${outboxId}`, { sendAt: sendAt.toISOString() });

/** Sends a sealed message with a hold or a send time: the 200 of a send that went, or the 202 of one that waits. */
export function sendSealed(
  inboxId: string,
  body: SendRequest,
  when: { holdSeconds?: number; sendAt?: Date },
): Promise<SendResult | QueuedSend> {
  const query = new URLSearchParams();
  if (when.holdSeconds) query.set('holdSeconds', String(when.holdSeconds));
  if (when.sendAt) query.set('sendAt', when.sendAt.toISOString());
  const q = query.toString();
  return api<SendResult | QueuedSend>('POST', `/inboxes/${inboxId}/send${q ? `?${q}` : ''}`, body);
}

/** Undo: the send comes back as a draft; its id. A send already being relayed is a 409. */
export async function cancelSend(inboxId: string, outboxId: string): Promise<string> {
  const r = await api<{ cancelled: boolean; draftId: string }>('POST', `/inboxes/${inboxId}/outbox/${outboxId}/cancel`);
  return r.draftId;
}

export const outboxSend = (inboxId: string, outboxId: string) => api<OutboxSend>('GET', `/inboxes/${inboxId}/outbox/${outboxId}`);

/** When a waiting send can no longer be taken back: the later of its send time and its hold. */
export function waitsUntil(q: QueuedSend): number {
  return Math.max(q.sendAt ? Date.parse(q.sendAt) : 0, q.holdUntil ? Date.parse(q.holdUntil) : 0, Date.now());
}
