// Plaintext that a mail app APPENDs to a zero-access inbox is sealed by Postern shortly after
// (lib/mail/resealing.ts): the sealed copy replaces it under a new message id, with the same date,
// flags and headers. Until then the API refuses its content (422). Instead of that error, the
// message screen says the message is being secured and, once the inbox stream shows the change,
// finds the sealed copy in the label's listing and opens it in place.
import type { LabelList, MessageList, MessageSummary } from '../../schemas/wire.ts';
import { api } from '../api.ts';
import { h, type Child } from '../ui.ts';
import { inboxHash, listedMessage, messageHash, PAGE_SIZE } from './list.ts';
import { subscribeWhileOn } from './live.ts';

/** How long to wait for the sealed copy before showing the server's refusal after all. */
export const RESEALING_WAIT_MS = 60_000;

const page = (inboxId: string, labelId: string) =>
  api<MessageList>('GET', `/inboxes/${inboxId}/labels/${labelId}/messages?limit=${PAGE_SIZE}`);

/** The message's listing and label: from the inbox screen, else the first page of each label. */
async function findListed(inboxId: string, msgId: string): Promise<{ summary: MessageSummary; labelId: string } | undefined> {
  const known = listedMessage(msgId);
  if (known) return known;
  const { labels } = await api<LabelList>('GET', `/inboxes/${inboxId}/labels`);
  for (const label of labels) {
    const summary = (await page(inboxId, label.id)).messages.find((m) => m.id === msgId);
    if (summary) return { summary, labelId: label.id };
  }
  return undefined;
}

/** The same message in sealed form: same date, sender and subject, another id. */
const sameMessage = (a: MessageSummary, b: MessageSummary) =>
  a.id !== b.id && a.receivedAt === b.receivedAt && a.subject === b.subject && a.from === b.from && a.date === b.date;

export async function awaitResealing(
  inboxId: string,
  msgId: string,
  hash: string,
  back: HTMLElement,
  refusal: string,
  display: (...children: Child[]) => void,
): Promise<void> {
  const status = h(
    'p',
    { class: 'notice', id: 'sealing', role: 'status' },
    'This message is being secured (encrypted for this inbox). It will open in a moment.',
  );
  const heading = h('h1', {}, 'Securing the message…');
  display(back, heading, status);
  const listed = await findListed(inboxId, msgId).catch(() => undefined);
  if (location.hash !== hash) return;
  if (listed?.summary.subject) heading.textContent = listed.summary.subject;

  let done = false;
  let timer: number | undefined;
  const finish = () => {
    done = true;
    clearTimeout(timer);
    clearTimeout(giveUp);
    unsubscribe();
  };
  // One listing per burst of changes.
  const look = () => {
    clearTimeout(timer);
    timer = window.setTimeout(async () => {
      if (done || location.hash !== hash || !listed) return;
      const fresh = await page(inboxId, listed.labelId).catch(() => null);
      const copy = fresh?.messages.find((m) => sameMessage(m, listed.summary));
      if (!copy || done || location.hash !== hash) return;
      finish();
      // Replaced in the history too: the plaintext's address leads nowhere now.
      location.replace(messageHash(inboxId, copy.id));
    }, 100);
  };
  const unsubscribe = subscribeWhileOn(hash, inboxId, {
    // Also when already connected: the sealing may have happened before this screen listened.
    onOpen: look,
    onChange: (change) => {
      if (change.type === 'message.added' && change.labelId === listed?.labelId) look();
      else if (change.type === 'message.removed' && change.msgId === msgId) {
        if (listed) look();
        // Without its listing the copy cannot be told from other mail: the inbox lists it.
        else status.replaceChildren('This message has been secured. ', h('a', { href: inboxHash(inboxId) }, 'Open it from the inbox'), '.');
      }
    },
  });
  const giveUp = window.setTimeout(() => {
    if (done || location.hash !== hash) return;
    finish();
    status.className = 'error';
    status.setAttribute('role', 'alert');
    status.textContent = `This message could not be opened: ${refusal}`;
  }, RESEALING_WAIT_MS);
}
