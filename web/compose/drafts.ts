// Drafts kept on the server while the member writes (docs/app.md, "Compose, reply, forward, drafts"; the endpoints:
// docs/sending.md, "Drafts"). A compatible inbox's draft is the message itself, so the member's
// mail apps show it in Drafts; a zero-access inbox's is sealed in this browser to the inbox's
// epoch key exactly as for /send, its literal data named after the draft's id (the server stores
// it and cannot read it). Nothing is kept in the browser: after the tab is killed, the draft is
// found again in the list below.
import PostalMime from 'postal-mime';
import type { ComposeData, Draft, DraftDetail, DraftList, RawDraft, SendRequest } from '../../schemas/wire.ts';
import { api, ApiError } from '../api.ts';
import { fromBase64, toBase64 } from '../bytes.ts';
import { timeElement } from '../dates.ts';
import { openSealed } from '../mail/open.ts';
import { addRoute } from '../routes.ts';
import { h, show } from '../ui.ts';
import { newDraftId, sealForSend } from './sealing.ts';

/** Saving waits this long after the last change, so a burst of typing is one save. */
export const SAVE_AFTER_MS = 2000;

export class DraftsUnavailable extends Error {}

/**
 * One draft on the server, saved again on each call to `save` with the same id. A sealed draft
 * needs an envelope recipient (schemas/send.json): until the member has typed one, the sender's
 * own address stands in; the recipients shown on restoring are the ones sealed in the message.
 */
export class ServerDraft {
  private saved = false;

  constructor(
    private readonly inboxId: string,
    private readonly sealed: boolean,
    readonly id: string = newDraftId(),
    existing = false,
  ) {
    this.saved = existing;
  }

  get exists(): boolean {
    return this.saved;
  }

  async save(compose: ComposeData, raw: Uint8Array, from: string, recipients: string[]): Promise<void> {
    const body: RawDraft | SendRequest = this.sealed
      ? {
          draftId: this.id,
          epoch: compose.epoch,
          ...(await sealForSend(compose, raw, this.id)),
          from,
          to: recipients.length ? recipients : [from],
        }
      : { draftId: this.id, raw: toBase64(raw) };
    try {
      if (this.saved) await api<Draft>('PUT', `/inboxes/${this.inboxId}/drafts/${this.id}`, body);
      else await api<Draft>('POST', `/inboxes/${this.inboxId}/drafts`, body);
    } catch (err) {
      // The mail server has no \Drafts mailbox (docs/sending.md, "Drafts"): nothing to save to.
      if (err instanceof ApiError && err.status === 409) throw new DraftsUnavailable(err.message);
      // Deleted meanwhile (sent or discarded from another tab): saved again as a new one.
      if (err instanceof ApiError && err.status === 404 && this.saved) {
        this.saved = false;
        return this.save(compose, raw, from, recipients);
      }
      throw err;
    }
    this.saved = true;
  }

  async remove(): Promise<void> {
    if (!this.saved) return;
    await api('DELETE', `/inboxes/${this.inboxId}/drafts/${this.id}`).catch((err: unknown) => {
      if (!(err instanceof ApiError && err.status === 404)) throw err;
    });
    this.saved = false;
  }
}

/** A saved draft's message, opened in this browser when sealed. */
export async function loadDraft(
  inboxId: string,
  draftId: string,
): Promise<{ detail: DraftDetail; message: Awaited<ReturnType<typeof PostalMime.parse>> }> {
  const detail = await api<DraftDetail>('GET', `/inboxes/${inboxId}/drafts/${draftId}`);
  let bytes: Uint8Array;
  if (detail.raw !== undefined) bytes = fromBase64(detail.raw);
  else if (detail.epoch !== undefined && detail.wrappedDek !== undefined && detail.ciphertext !== undefined)
    bytes = await openSealed(inboxId, { epoch: detail.epoch, wrappedDek: detail.wrappedDek, ciphertext: detail.ciphertext });
  else throw new Error('This draft has no content to open.');
  return { detail, message: await PostalMime.parse(bytes) };
}

/** What a reply draft answers, so sending it after a restore still marks the original answered. */
const ORIGIN_KEY = 'postern.draft-origin.';
export const draftOrigin = {
  get: (draftId: string): string | null => localStorage.getItem(ORIGIN_KEY + draftId),
  set: (draftId: string, msgId: string) => localStorage.setItem(ORIGIN_KEY + draftId, msgId),
  forget: (draftId: string) => localStorage.removeItem(ORIGIN_KEY + draftId),
};

async function draftsPage(inboxId: string): Promise<void> {
  show(h('h1', {}, 'Opening…'));
  const { drafts } = await api<DraftList>('GET', `/inboxes/${inboxId}/drafts`);
  const items = drafts.map((d) =>
    h(
      'li',
      { 'data-draft': d.id },
      h('a', { href: `#/compose/${inboxId}/draft/${d.id}` }, d.subject ?? (d.sealed ? 'Encrypted draft' : '(no subject)')),
      h('span', { class: 'muted' }, ` to ${d.to.join(', ') || 'nobody yet'}, saved `, timeElement(d.savedAt)),
    ),
  );
  show(
    h('h1', {}, 'Drafts'),
    items.length ? h('ul', { id: 'drafts' }, ...items) : h('p', { id: 'drafts-empty' }, 'No drafts.'),
    h('p', {}, h('a', { href: `#/compose/${inboxId}` }, 'New message'), ' ', h('a', { href: `#/inbox/${inboxId}` }, 'Back to the inbox')),
  );
}

addRoute(/^#\/compose\/(ibx_[0-9A-Z]{26})\/drafts$/, (m) => draftsPage(m[1]!));
