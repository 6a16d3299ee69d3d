// Compose, reply and forward: `#/compose/<ibx>`, `#/compose/<ibx>/reply/<msg>`,
// `#/compose/<ibx>/forward/<msg>`. The message is built (mime.ts) and sealed (sealing.ts) in this
// browser and sent with POST /send: the server opens it only to relay it. A draft keeps its
// draftId and its sealed body while its content is unchanged, so "Try again" after a lost
// answer or a 503 can never send it twice (the server answers a known draft with its first answer).
import PostalMime, { type Address } from 'postal-mime';
import type { ComposeData, SendRequest, SendResult } from '../../schemas/wire.ts';
import { api, ApiError } from '../api.ts';
import { openMessage, messageDetail } from '../mail/open.ts';
import { addRoute } from '../routes.ts';
import { h, report, show } from '../ui.ts';
import { buildMessage, newMessageId, parseAddressList, type Mailbox, type OutgoingAttachment } from './mime.ts';
import { newDraftId, sealForSend } from './sealing.ts';

type Mode = 'new' | 'reply' | 'forward';

/** The sending limit (docs/sending.md), checked here so a member learns it before the upload. */
const MAX_MESSAGE_BYTES = 26_214_400;

interface Prefill {
  to: string;
  subject: string;
  text: string;
  inReplyTo?: string;
  references?: string[];
  forwarded?: { bytes: Uint8Array; filename: string };
}

/** "Re: " once: a subject that already starts with a reply prefix keeps it as it is. */
export function replySubject(subject: string): string {
  return /^\s*(re|aw|sv|antw)\s*:/i.test(subject) ? subject.trim() : `Re: ${subject.trim()}`;
}

export function forwardSubject(subject: string): string {
  return /^\s*(fwd?|wg)\s*:/i.test(subject) ? subject.trim() : `Fwd: ${subject.trim()}`;
}

/** The message ids in a Message-ID, In-Reply-To or References field. */
const messageIds = (value: string | undefined): string[] => value?.match(/<[^<>\s]+>/g) ?? [];

/** Addresses as the To box shows them: `Name <a@b>`, quoted where the name needs it. */
function addressText(list: Address[]): string {
  return list
    .flatMap((a) => (a.group ? a.group : [a]))
    .map((m) =>
      !m.name
        ? m.address
        : /[",<>@;:\\]/.test(m.name)
          ? `"${m.name.replace(/(["\\])/g, '\\$1')}" <${m.address}>`
          : `${m.name} <${m.address}>`,
    )
    .join(', ');
}

const quote = (text: string) =>
  text
    .replace(/\r\n?/g, '\n')
    .replace(/\n+$/, '')
    .split('\n')
    .map((l) => (l.startsWith('>') ? `>${l}` : `> ${l}`))
    .join('\n');

async function prefill(inboxId: string, mode: Mode, msgId: string | undefined): Promise<Prefill> {
  if (mode === 'new' || !msgId) return { to: '', subject: '', text: '' };
  const detail = await messageDetail(inboxId, msgId);
  const bytes = await openMessage(inboxId, msgId, detail);
  // The message view's parser; a forward attaches the original bytes themselves, not a re-encoding.
  const original = await PostalMime.parse(bytes);
  const subject = original.subject ?? detail.message.subject ?? '';
  if (mode === 'forward') {
    const name = (subject.replace(/[\\/:*?"<>|\x00-\x1f]+/g, ' ').trim() || 'message').slice(0, 100);
    return { to: '', subject: forwardSubject(subject), text: '', forwarded: { bytes, filename: `${name}.eml` } };
  }
  const messageId = messageIds(original.messageId ?? detail.messageId)[0];
  // RFC 5322 3.6.4: the parent's References (or its single In-Reply-To), then the parent itself.
  const parentRefs = messageIds(original.references);
  const inReplyTo = messageIds(original.inReplyTo);
  const references = [...(parentRefs.length ? parentRefs : inReplyTo.length === 1 ? inReplyTo : []), ...(messageId ? [messageId] : [])];
  const from = original.from ? addressText([original.from]) : (detail.message.from ?? '');
  const to = original.replyTo?.length ? addressText(original.replyTo) : (detail.replyTo ?? from);
  const date = original.headers.find((x) => x.key === 'date')?.value ?? detail.message.date ?? '';
  return {
    to,
    subject: replySubject(subject),
    text: `\n\nOn ${date}, ${from} wrote:\n${quote(original.text ?? '')}\n`,
    ...(messageId ? { inReplyTo: messageId } : {}),
    ...(references.length ? { references } : {}),
  };
}

async function readFiles(input: HTMLInputElement): Promise<OutgoingAttachment[]> {
  return Promise.all(
    Array.from(input.files ?? [], async (f) => ({
      filename: f.name,
      contentType: f.type || 'application/octet-stream',
      data: new Uint8Array(await f.arrayBuffer()),
    })),
  );
}

async function composePage(inboxId: string, mode: Mode, msgId?: string): Promise<void> {
  show(h('h1', {}, 'Opening…'));
  const [compose, pre] = await Promise.all([api<ComposeData>('GET', `/inboxes/${inboxId}/compose`), prefill(inboxId, mode, msgId)]);
  const input = (id: string, label: string, value = '', attrs: Record<string, string> = {}) => {
    const el = h('input', { id, name: id, value, autocomplete: 'off', ...attrs });
    return { el, nodes: [h('label', { for: id }, label), el] };
  };
  const from = h('select', { id: 'compose-from', name: 'from' }, ...compose.addresses.map((a) => h('option', { value: a }, a)));
  const to = input('compose-to', 'To', pre.to, { type: 'text', inputmode: 'email' });
  const cc = input('compose-cc', 'Cc', '', { type: 'text', inputmode: 'email' });
  const bcc = input('compose-bcc', 'Bcc', '', { type: 'text', inputmode: 'email' });
  const subject = input('compose-subject', 'Subject', pre.subject, { type: 'text', maxlength: '900' });
  const body = h('textarea', { id: 'compose-body', name: 'body', rows: '12' });
  body.value = pre.text;
  const files = h('input', { id: 'compose-attachments', name: 'attachments', type: 'file', multiple: '' });
  const status = h('p', { id: 'compose-status', role: 'status' });
  // Not a submit button: Enter in the To or Subject box must not send a half-written message.
  // Ctrl+Enter (or Cmd+Enter) in the form sends, as in most mail clients.
  const sendButton = h('button', { type: 'button', id: 'compose-send', 'aria-keyshortcuts': 'Control+Enter' }, 'Send');
  const form = h(
    'form',
    { id: 'compose-form' },
    h('label', { for: 'compose-from' }, 'From'),
    from,
    ...to.nodes,
    ...cc.nodes,
    ...bcc.nodes,
    ...subject.nodes,
    h('label', { for: 'compose-body' }, 'Message'),
    body,
    pre.forwarded
      ? h('p', { class: 'muted', id: 'compose-forwarded' }, `The original message is attached: ${pre.forwarded.filename}`)
      : null,
    h('label', { for: 'compose-attachments' }, 'Attachments'),
    files,
    h('div', { class: 'actions' }, sendButton, h('a', { href: '#', class: 'secondary' }, 'Cancel')),
    status,
  );

  let draft: { snapshot: string; body: SendRequest } | null = null;
  let sent = false;
  form.addEventListener('submit', (e) => e.preventDefault());
  form.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      sendButton.click();
    }
  });
  sendButton.addEventListener('click', () => {
    if (sent || sendButton.disabled) return;
    sendButton.disabled = true;
    status.dataset.state = 'sending';
    void (async () => {
      try {
        const parse = (box: HTMLInputElement) => parseAddressList(box.value);
        const [toList, ccList, bccList] = [parse(to.el), parse(cc.el), parse(bcc.el)];
        const recipients = [...new Set([...toList, ...ccList, ...bccList].map((m) => m.address.toLowerCase()))];
        if (recipients.length === 0) throw new Error('Add at least one recipient.');
        const attachments = await readFiles(files);
        const snapshot = JSON.stringify([
          from.value,
          to.el.value,
          cc.el.value,
          bcc.el.value,
          subject.el.value,
          body.value,
          Array.from(files.files ?? [], (f) => [f.name, f.size, f.lastModified]),
        ]);
        if (!draft || draft.snapshot !== snapshot) {
          // Changed content is a new message: a new draft, so it can never be taken for the old one.
          status.textContent = 'Encrypting…';
          const draftId = newDraftId();
          const sender: Mailbox = { address: from.value };
          const raw = buildMessage({
            from: sender,
            to: toList,
            cc: ccList,
            bcc: bccList,
            subject: subject.el.value,
            text: body.value,
            attachments,
            ...(pre.forwarded ? { forwarded: pre.forwarded } : {}),
            messageId: newMessageId(from.value),
            date: new Date(),
            ...(pre.inReplyTo ? { inReplyTo: pre.inReplyTo } : {}),
            ...(pre.references ? { references: pre.references } : {}),
          });
          if (raw.length > MAX_MESSAGE_BYTES)
            throw new Error(`The message is ${(raw.length / 2 ** 20).toFixed(1)} MB with its attachments; the limit is 25 MB.`);
          draft = {
            snapshot,
            body: { draftId, epoch: compose.epoch, ...(await sealForSend(compose, raw, draftId)), from: from.value, to: recipients },
          };
        }
        status.textContent = 'Sending…';
        await api<SendResult>('POST', `/inboxes/${inboxId}/send`, draft.body);
        sent = true;
        status.textContent = `Sent to ${recipients.length} recipient${recipients.length === 1 ? '' : 's'}.`;
        status.dataset.sent = draft.body.draftId;
        status.dataset.state = 'sent';
        for (const el of form.querySelectorAll('input, select, textarea')) (el as HTMLInputElement).disabled = true;
        if (mode === 'reply' && msgId) {
          // The reply went; marking the original is a separate step that may fail on its own.
          await api('POST', `/inboxes/${inboxId}/messages/${msgId}/flags`, { add: ['answered'] }).catch((err: unknown) => {
            status.textContent += ` The original could not be marked answered: ${(err as Error).message}`;
          });
        }
      } catch (err) {
        // A 503 or a lost connection (fetch's TypeError) may be retried as it is; other refusals need a change first.
        const retry =
          err instanceof TypeError || (err instanceof ApiError && err.status === 503)
            ? ' Try again: the same draft is sent at most once.'
            : '';
        status.textContent = `Not sent: ${(err as Error).message.replace(/\.$/, '')}.${retry}`;
        status.dataset.state = 'failed';
        report(err);
      } finally {
        sendButton.disabled = sent;
      }
    })();
  });

  show(h('h1', {}, mode === 'reply' ? 'Reply' : mode === 'forward' ? 'Forward' : 'New message'), form);
  // Focus the first field the member has to fill in.
  (mode === 'reply' ? body : to.el).focus();
  if (mode === 'reply') body.setSelectionRange(0, 0);
}

const INBOX = 'ibx_[0-9A-Z]{26}';
const MSG = 'msg_[0-9A-Z]{26}';
addRoute(new RegExp(`^#/compose/(${INBOX})$`), (m) => composePage(m[1]!, 'new'));
addRoute(new RegExp(`^#/compose/(${INBOX})/(reply|forward)/(${MSG})$`), (m) => composePage(m[1]!, m[2] as Mode, m[3]));
