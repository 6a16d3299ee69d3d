// Compose, reply, reply to all, forward and drafts: `#/compose/<ibx>`,
// `#/compose/<ibx>/(reply|reply-all|forward)/<msg>`, `#/compose/<ibx>/draft/<draft>`. The message
// is built (mime.ts) and sealed (sealing.ts) in this browser and sent with POST /send: the server
// opens it only to relay it. A send keeps its draftId and its sealed body while the content is
// unchanged, so "Try again" after a lost answer or a 503 can never send it twice (the server
// answers a known draft with its first answer). While the member writes, the message is also
// kept on the server as a draft (drafts.ts), removed once it is sent. Every send waits on the
// server for an undo hold, or until its send time (outbox.ts), so it can be taken back as a
// draft; closing the tab meanwhile still sends it (docs/app.md, "Compose").
import PostalMime, { type Address, type Email } from 'postal-mime';
import type { ComposeData, IdentityList, InboxList, SendRequest } from '../../schemas/wire.ts';
import { api, ApiError } from '../api.ts';
import { openMessage, messageDetail } from '../mail/open.ts';
import { addRoute } from '../routes.ts';
import { h, report, show } from '../ui.ts';
import { attachSuggestions, seenAddresses } from './addresses.ts';
import { draftOrigin, DraftsUnavailable, loadDraft, SAVE_AFTER_MS, ServerDraft } from './drafts.ts';
import { buildMessage, newMessageId, parseAddressList, type Mailbox, type OutgoingAttachment } from './mime.ts';
import { cancelSend, outboxSend, sendSealed, UNDO_SECONDS, waitsUntil, type QueuedSend } from './outbox.ts';
import { newDraftId, sealForSend } from './sealing.ts';

type Mode = 'new' | 'reply' | 'reply-all' | 'forward' | 'draft';

/** The sending limit (docs/sending.md), checked here so a member learns it before the upload. */
const MAX_MESSAGE_BYTES = 26_214_400;

interface Prefill {
  from?: string;
  to: string;
  cc: string;
  bcc: string;
  subject: string;
  /** The member's text; the signature goes after it and `quoted` after that. */
  text: string;
  quoted: string;
  attachments: OutgoingAttachment[];
  inReplyTo?: string;
  references?: string[];
  /** The message a reply answers, marked \Answered once the reply is sent. */
  answers?: string;
  /** A draft being edited again. */
  draftId?: string;
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

const mailboxes = (list: Address[] | undefined) => (list ?? []).flatMap((a) => (a.group ? a.group : [a]));

/** Addresses as the To box shows them: `Name <a@b>`, quoted where the name needs it. */
function addressText(list: Address[] | undefined): string {
  return mailboxes(list)
    .map((m) =>
      !m.name
        ? m.address
        : /[",<>@;:\\]/.test(m.name)
          ? `"${m.name.replace(/(["\\])/g, '\\$1')}" <${m.address}>`
          : `${m.name} <${m.address}>`,
    )
    .join(', ');
}

/**
 * Reply-all's recipients (as JSON compose computes them, docs/sending.md, "Compose from JSON"):
 * To is the Reply-To, else the From, or the original's To when it was the inbox's own message;
 * Cc its To and Cc; the inbox's own addresses out, each recipient once.
 */
export function replyAllRecipients(
  original: Pick<Email, 'from' | 'replyTo' | 'to' | 'cc'>,
  own: string[],
): { to: Address[]; cc: Address[] } {
  const ownSet = new Set(own.map((a) => a.toLowerCase()));
  const fromOwn = !!original.from?.address && ownSet.has(original.from.address.toLowerCase());
  const seen = new Set<string>();
  const keep = (list: Address[]) =>
    mailboxes(list).filter((m) => {
      const key = m.address?.toLowerCase();
      if (!key || ownSet.has(key) || seen.has(key)) return false;
      seen.add(key);
      return true;
    });
  const to = keep(fromOwn ? (original.to ?? []) : original.replyTo?.length ? original.replyTo : original.from ? [original.from] : []);
  const cc = keep([...(fromOwn ? [] : (original.to ?? [])), ...(original.cc ?? [])]);
  return { to, cc };
}

const quote = (text: string) =>
  text
    .replace(/\r\n?/g, '\n')
    .replace(/\n+$/, '')
    .split('\n')
    .map((l) => (l.startsWith('>') ? `>${l}` : `> ${l}`))
    .join('\n');

/** The original's text; for HTML-only mail its text content, parsed inert (DOMParser runs nothing). */
const plainText = (m: Email) => m.text ?? (m.html ? (new DOMParser().parseFromString(m.html, 'text/html').body.textContent ?? '') : '');

const attachmentsOf = (m: Email): OutgoingAttachment[] =>
  m.attachments.map((a) => ({
    filename: a.filename ?? 'attachment',
    contentType: a.mimeType || 'application/octet-stream',
    data: typeof a.content === 'string' ? new TextEncoder().encode(a.content) : new Uint8Array(a.content),
  }));

const EMPTY: Prefill = { to: '', cc: '', bcc: '', subject: '', text: '', quoted: '', attachments: [] };

async function prefill(inboxId: string, mode: Mode, id: string | undefined, own: string[]): Promise<Prefill> {
  if (mode === 'new' || !id) return EMPTY;
  if (mode === 'draft') {
    const { message } = await loadDraft(inboxId, id);
    const inReplyTo = messageIds(message.inReplyTo)[0];
    const references = messageIds(message.references);
    const answers = draftOrigin.get(id);
    return {
      ...(message.from?.address ? { from: message.from.address } : {}),
      to: addressText(message.to),
      cc: addressText(message.cc),
      bcc: addressText(message.bcc),
      subject: message.subject ?? '',
      text: (message.text ?? '').replace(/\r\n?/g, '\n'),
      quoted: '',
      attachments: attachmentsOf(message),
      draftId: id,
      ...(inReplyTo ? { inReplyTo } : {}),
      ...(references.length ? { references } : {}),
      ...(answers ? { answers } : {}),
    };
  }
  const detail = await messageDetail(inboxId, id);
  const bytes = await openMessage(inboxId, id, detail);
  // The message view's parser, on the bytes opened in this browser (zero-access inboxes too).
  const original = await PostalMime.parse(bytes);
  const subject = original.subject ?? detail.message.subject ?? '';
  const messageId = messageIds(original.messageId ?? detail.messageId)[0];
  // RFC 5322 3.6.4: the parent's References (or its single In-Reply-To), then the parent itself.
  const parentRefs = messageIds(original.references);
  const inReplyTo = messageIds(original.inReplyTo);
  const references = [...(parentRefs.length ? parentRefs : inReplyTo.length === 1 ? inReplyTo : []), ...(messageId ? [messageId] : [])];
  const threading = { ...(messageId ? { inReplyTo: messageId } : {}), ...(references.length ? { references } : {}) };
  const from = original.from ? addressText([original.from]) : (detail.message.from ?? '');
  const date = original.headers.find((x) => x.key === 'date')?.value ?? detail.message.date ?? '';
  if (mode === 'forward') {
    const head = [
      '---------- Forwarded message ---------',
      `From: ${from}`,
      `Date: ${date}`,
      `Subject: ${subject}`,
      `To: ${addressText(original.to) || (detail.message.to ?? '')}`,
      ...(original.cc?.length ? [`Cc: ${addressText(original.cc)}`] : []),
    ];
    return {
      ...EMPTY,
      subject: forwardSubject(subject),
      quoted: `\n\n${head.join('\n')}\n\n${plainText(original).replace(/\r\n?/g, '\n')}`,
      attachments: attachmentsOf(original),
      ...threading,
    };
  }
  const recipients =
    mode === 'reply-all'
      ? replyAllRecipients(original, own)
      : { to: original.replyTo?.length ? original.replyTo : original.from ? [original.from] : [], cc: [] };
  return {
    ...EMPTY,
    to: addressText(recipients.to) || (detail.replyTo ?? from),
    cc: addressText(recipients.cc),
    subject: replySubject(subject),
    quoted: `\n\nOn ${date}, ${from} wrote:\n${quote(plainText(original))}\n`,
    answers: id,
    ...threading,
  };
}

/** The addresses in a box, leaving out an entry still being typed (a draft keeps what parses). */
function lenientAddresses(text: string): Mailbox[] {
  try {
    return parseAddressList(text);
  } catch {
    return text.split(/[,;]/).flatMap((entry) => {
      try {
        return parseAddressList(entry);
      } catch {
        return [];
      }
    });
  }
}

const sizeText = (n: number) => (n < 1024 ? `${n} bytes` : n < 2 ** 20 ? `${Math.round(n / 1024)} KB` : `${(n / 2 ** 20).toFixed(1)} MB`);

async function composePage(inboxId: string, mode: Mode, id?: string): Promise<void> {
  show(h('h1', {}, 'Opening…'));
  const compose = await api<ComposeData>('GET', `/inboxes/${inboxId}/compose`);
  const [pre, grants, identities] = await Promise.all([
    prefill(inboxId, mode, id, compose.addresses),
    api<InboxList>('GET', '/inboxes'),
    api<IdentityList>('GET', `/inboxes/${inboxId}/identities`).catch(() => ({ identities: [] })),
  ]);
  const zeroAccess = grants.inboxes.find((g) => g.inboxId === inboxId)?.mode === 'zero-access';
  const identity = (address: string) => identities.identities.find((i) => i.address.toLowerCase() === address.toLowerCase());
  // RFC 3676 4.3: the "-- " line lets mail apps tell the signature from the text.
  const signatureOf = (address: string) => {
    const sig = identity(address)?.signatureText?.replace(/\r\n?/g, '\n').replace(/\n+$/, '');
    return sig ? `\n\n-- \n${sig}` : '';
  };

  const input = (elId: string, label: string, value = '', attrs: Record<string, string> = {}) => {
    const el = h('input', { id: elId, name: elId, value, autocomplete: 'off', ...attrs });
    return { el, nodes: [h('label', { for: elId }, label), el] };
  };
  const from = h('select', { id: 'compose-from', name: 'from' }, ...compose.addresses.map((a) => h('option', { value: a }, a)));
  if (pre.from && compose.addresses.some((a) => a.toLowerCase() === pre.from!.toLowerCase()))
    from.value = compose.addresses.find((a) => a.toLowerCase() === pre.from!.toLowerCase())!;
  const to = input('compose-to', 'To', pre.to, { type: 'text', inputmode: 'email' });
  const cc = input('compose-cc', 'Cc', pre.cc, { type: 'text', inputmode: 'email' });
  const bcc = input('compose-bcc', 'Bcc', pre.bcc, { type: 'text', inputmode: 'email' });
  const subject = input('compose-subject', 'Subject', pre.subject, { type: 'text', maxlength: '900' });
  const suggestions = attachSuggestions([to.el, cc.el, bcc.el], seenAddresses(inboxId, compose.addresses));
  const body = h('textarea', { id: 'compose-body', name: 'body', rows: '12' });
  let signature = mode === 'draft' ? '' : signatureOf(from.value);
  body.value = pre.text + signature + pre.quoted;
  from.addEventListener('change', () => {
    // The signature follows the From address, where the member left it as it was.
    const next = signatureOf(from.value);
    if (signature && body.value.includes(signature)) body.value = body.value.replace(signature, next);
    else if (!signature && next && mode !== 'draft') body.value = pre.text + next + body.value.slice(pre.text.length);
    signature = next;
  });

  // Attachments: picked or dropped, listed with a Remove button each; read once, when added.
  const attached: OutgoingAttachment[] = [...pre.attachments];
  let attachVersion = 0;
  let reading: Promise<void> = Promise.resolve();
  const fileList = h('ul', { id: 'compose-attachment-list' });
  const files = h('input', { id: 'compose-attachments', name: 'attachments', type: 'file', multiple: '' });
  const listAttachments = () => {
    fileList.replaceChildren(
      ...attached.map((a, i) => {
        const remove = h('button', { type: 'button', class: 'secondary', 'aria-label': `Remove ${a.filename}` }, 'Remove');
        remove.addEventListener('click', () => {
          attached.splice(i, 1);
          attachVersion++;
          listAttachments();
          changed();
          files.focus();
        });
        return h('li', {}, `${a.filename} (${sizeText(a.data.length)}) `, remove);
      }),
    );
  };
  const addFiles = (list: FileList | null) => {
    const picked = Array.from(list ?? []);
    if (!picked.length) return;
    reading = reading.then(async () => {
      for (const f of picked)
        attached.push({ filename: f.name, contentType: f.type || 'application/octet-stream', data: new Uint8Array(await f.arrayBuffer()) });
      attachVersion++;
      listAttachments();
      changed();
    });
  };
  files.addEventListener('change', () => {
    addFiles(files.files);
    // Read already: the box is emptied so the same file can be added again.
    void reading.then(() => {
      files.value = '';
    });
  });
  listAttachments();

  const status = h('p', { id: 'compose-status', role: 'status', 'aria-live': 'polite' });
  // Not announced: a save every few seconds would interrupt a screen reader while typing.
  const draftStatus = h('p', { id: 'compose-draft-status', class: 'muted' });
  // Not a submit button: Enter in the To or Subject box must not send a half-written message.
  // Ctrl+Enter (or Cmd+Enter) in the form sends, as in most mail clients.
  const sendButton = h('button', { type: 'button', id: 'compose-send', 'aria-keyshortcuts': 'Control+Enter' }, 'Send');
  const discardButton = h('button', { type: 'button', id: 'compose-discard', class: 'secondary' }, 'Discard');
  const sendAtBox = h('input', { id: 'compose-send-at', name: 'sendAt', type: 'datetime-local' });
  const sendLaterButton = h('button', { type: 'button', id: 'compose-send-later', class: 'secondary' }, 'Send later');
  const undoButton = h('button', { type: 'button', id: 'compose-undo', class: 'secondary' }, 'Undo');
  const form = h(
    'form',
    { id: 'compose-form' },
    h('label', { for: 'compose-from' }, 'From'),
    from,
    ...to.nodes,
    ...cc.nodes,
    ...bcc.nodes,
    suggestions,
    ...subject.nodes,
    h('label', { for: 'compose-body' }, 'Message'),
    body,
    h('label', { for: 'compose-attachments' }, 'Attachments (choose files, or drop them on this form)'),
    files,
    fileList,
    h('div', { class: 'actions' }, sendButton, discardButton, h('a', { href: `#/inbox/${inboxId}`, class: 'secondary' }, 'Close')),
    h('div', { class: 'actions' }, h('label', { for: 'compose-send-at' }, 'Send later, at'), sendAtBox, sendLaterButton),
    status,
    draftStatus,
  );
  form.addEventListener('dragover', (e) => {
    if (!e.dataTransfer?.types.includes('Files')) return;
    e.preventDefault();
    e.dataTransfer.dropEffect = 'copy';
    form.classList.add('dropping');
  });
  form.addEventListener('dragleave', () => form.classList.remove('dropping'));
  form.addEventListener('drop', (e) => {
    if (!e.dataTransfer?.files.length) return;
    e.preventDefault();
    form.classList.remove('dropping');
    addFiles(e.dataTransfer.files);
  });

  const message = (toList: Mailbox[], ccList: Mailbox[], bccList: Mailbox[]) => {
    const name = identity(from.value)?.displayName;
    return buildMessage({
      from: name ? { name, address: from.value } : { address: from.value },
      to: toList,
      cc: ccList,
      bcc: bccList,
      subject: subject.el.value,
      text: body.value,
      attachments: attached,
      messageId: newMessageId(from.value),
      date: new Date(),
      ...(pre.inReplyTo ? { inReplyTo: pre.inReplyTo } : {}),
      ...(pre.references ? { references: pre.references } : {}),
    });
  };
  const envelope = (lists: Mailbox[][]) => [...new Set(lists.flat().map((m) => m.address.toLowerCase()))];

  // The draft on the server: saved SAVE_AFTER_MS after a change, one save at a time.
  const serverDraft = new ServerDraft(inboxId, zeroAccess, pre.draftId, pre.draftId !== undefined);
  if (pre.answers) draftOrigin.set(serverDraft.id, pre.answers);
  let timer: ReturnType<typeof setTimeout> | undefined;
  let saving: Promise<void> = Promise.resolve();
  let dirty = false;
  let holding = false;
  let unavailable = false;
  let ownHash = location.hash;
  const saveDraft = async () => {
    timer = undefined;
    if (!dirty || holding || unavailable) return;
    dirty = false;
    await reading;
    try {
      const lists = [to.el, cc.el, bcc.el].map((b) => lenientAddresses(b.value));
      const raw = message(lists[0]!, lists[1]!, lists[2]!);
      if (raw.length > MAX_MESSAGE_BYTES) throw new Error('the message is over 25 MB with its attachments');
      await serverDraft.save(compose, raw, from.value, envelope(lists));
      draftStatus.textContent = `Draft saved at ${new Date().toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit' })}.`;
      draftStatus.dataset.saved = serverDraft.id;
      // Reopening this address (a restored tab, the history) opens the draft rather than a blank form.
      const draftHash = `#/compose/${inboxId}/draft/${serverDraft.id}`;
      if (location.hash === ownHash && ownHash !== draftHash) {
        history.replaceState(history.state, '', draftHash);
        ownHash = draftHash;
      }
    } catch (err) {
      if (err instanceof DraftsUnavailable) {
        unavailable = true;
        draftStatus.textContent = 'Drafts are not saved: this mail server has no Drafts folder.';
        return;
      }
      dirty = true;
      draftStatus.textContent = `The draft is not saved: ${(err as Error).message.replace(/\.$/, '')}. Trying again in a moment.`;
      timer ??= setTimeout(() => void flush(), SAVE_AFTER_MS * 3);
    }
  };
  const flush = () => (saving = saving.then(saveDraft));
  function changed(): void {
    if (sent || unavailable) return;
    dirty = true;
    timer ??= setTimeout(() => void flush(), SAVE_AFTER_MS);
  }
  form.addEventListener('input', (e) => {
    if (e.target !== files) changed();
  });
  form.addEventListener('change', (e) => {
    if (e.target === from) changed();
  });

  discardButton.addEventListener('click', () => {
    holding = true;
    clearTimeout(timer);
    timer = undefined;
    void (async () => {
      try {
        await saving;
        await serverDraft.remove();
        draftOrigin.forget(serverDraft.id);
        location.hash = `#/inbox/${inboxId}`;
      } catch (err) {
        holding = false;
        report(err);
      }
    })();
  });

  let draft: { snapshot: string; body: SendRequest } | null = null;
  let sent = false;
  form.addEventListener('submit', (e) => e.preventDefault());
  form.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      sendButton.click();
    }
  });
  sendButton.addEventListener('click', () => send());
  sendLaterButton.addEventListener('click', () => {
    const at = sendAtBox.value ? new Date(sendAtBox.value) : null;
    if (!at || Number.isNaN(at.getTime())) {
      status.textContent = 'Choose the day and time to send it.';
      sendAtBox.focus();
      return;
    }
    send(at);
  });

  const recipientsText = (n: number) => `${n} recipient${n === 1 ? '' : 's'}`;
  /** The send went (or its wait ended): the page says so, and a reply marks its original. */
  const done = async (draftId: string, recipients: number) => {
    status.textContent = `Sent to ${recipientsText(recipients)}.`;
    status.dataset.sent = draftId;
    status.dataset.state = 'sent';
    if (pre.answers) {
      // The reply went; marking the original is a separate step that may fail on its own.
      await api('POST', `/inboxes/${inboxId}/messages/${pre.answers}/flags`, { add: ['answered'] }).catch((err: unknown) => {
        status.textContent += ` The original could not be marked answered: ${(err as Error).message}`;
      });
    }
  };
  /** A send waiting in the outbox: Undo until its hold or send time ends, then its outcome. */
  const waiting = (q: QueuedSend, draftId: string, recipients: number) => {
    const until = waitsUntil(q);
    const at = new Date(until).toLocaleString([], { dateStyle: 'medium', timeStyle: 'short' });
    status.dataset.state = q.state;
    status.dataset.outbox = q.outboxId;
    status.replaceChildren(q.state === 'scheduled' ? `Scheduled for ${at}. ` : 'Sending… ', undoButton);
    undoButton.disabled = false;
    undoButton.focus();
    const settle = async () => {
      undoButton.disabled = true;
      try {
        const row = await outboxSend(inboxId, q.outboxId);
        if (row.state === 'failed') {
          status.textContent = `Not sent: ${row.reason ?? 'the mail server refused it'}.`;
          status.dataset.state = 'failed';
        } else if (row.state === 'unknown') {
          // docs/sending.md, "Exactly once": never sent again; the outbox lists it until settled.
          status.textContent =
            "Outcome unknown: the mail server's answer was lost, so it may or may not have the message. It will not be sent again; the Outbox shows it.";
          status.dataset.state = 'unknown';
        } else if (row.state !== 'cancelled') await done(draftId, recipients);
      } catch (err) {
        // The send is on the server either way; only its outcome is unknown here.
        status.textContent = `Sent to ${recipientsText(recipients)} (its outcome could not be read: ${(err as Error).message}).`;
      }
    };
    // setTimeout holds at most 2^31-1 ms (about 24.8 days): a send later than that keeps its line.
    const delay = until - Date.now();
    const timer = delay < 2 ** 31 - 1 ? setTimeout(() => void settle(), delay + 500) : undefined;
    undoButton.onclick = () => {
      undoButton.disabled = true;
      clearTimeout(timer);
      void (async () => {
        try {
          const back = await cancelSend(inboxId, q.outboxId);
          if (pre.answers) draftOrigin.set(back, pre.answers);
          status.textContent = 'Not sent: it is a draft again.';
          status.dataset.state = 'cancelled';
          location.hash = `#/compose/${inboxId}/draft/${back}`;
        } catch (err) {
          status.textContent =
            err instanceof ApiError && err.status === 409
              ? 'Too late to undo: it is already on its way.'
              : `Could not undo: ${(err as Error).message.replace(/\.$/, '')}.`;
          report(err);
          void settle();
        }
      })();
    };
  };

  function send(sendAt?: Date): void {
    if (sent || sendButton.disabled) return;
    sendButton.disabled = true;
    sendLaterButton.disabled = true;
    status.dataset.state = 'sending';
    // No draft save while sending: a save after the send would put the sent message back in Drafts.
    holding = true;
    void (async () => {
      try {
        await saving;
        await reading;
        const parse = (box: HTMLInputElement) => parseAddressList(box.value);
        const [toList, ccList, bccList] = [parse(to.el), parse(cc.el), parse(bcc.el)];
        const recipients = envelope([toList, ccList, bccList]);
        if (recipients.length === 0) throw new Error('Add at least one recipient.');
        const snapshot = JSON.stringify([from.value, to.el.value, cc.el.value, bcc.el.value, subject.el.value, body.value, attachVersion]);
        if (!draft || draft.snapshot !== snapshot) {
          // Changed content is a new message: a new draft, so it can never be taken for the old one.
          status.textContent = 'Encrypting…';
          const draftId = newDraftId();
          const raw = message(toList, ccList, bccList);
          if (raw.length > MAX_MESSAGE_BYTES)
            throw new Error(`The message is ${(raw.length / 2 ** 20).toFixed(1)} MB with its attachments; the limit is 25 MB.`);
          draft = {
            snapshot,
            body: { draftId, epoch: compose.epoch, ...(await sealForSend(compose, raw, draftId)), from: from.value, to: recipients },
          };
        }
        status.textContent = 'Sending…';
        // The one place a message leaves: it waits on the server for its undo hold or send time.
        const result = await sendSealed(inboxId, draft.body, sendAt ? { sendAt } : { holdSeconds: UNDO_SECONDS });
        sent = true;
        for (const el of form.querySelectorAll('input, select, textarea')) (el as HTMLInputElement).disabled = true;
        discardButton.disabled = true;
        if (result.sent) await done(draft.body.draftId, recipients.length);
        else waiting(result, draft.body.draftId, recipients.length);
        // Sent: its draft goes (a failure leaves it in Drafts, where the member can delete it).
        await serverDraft.remove().then(
          () => {
            draftStatus.textContent = '';
          },
          (err: unknown) => {
            draftStatus.textContent = `The draft stays in Drafts: ${(err as Error).message}`;
          },
        );
        draftOrigin.forget(serverDraft.id);
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
        sendLaterButton.disabled = sent;
        if (!sent) {
          holding = false;
          if (dirty) changed();
        }
      }
    })();
  }

  const titles: Record<Mode, string> = {
    new: 'New message',
    reply: 'Reply',
    'reply-all': 'Reply to all',
    forward: 'Forward',
    draft: 'Draft',
  };
  show(h('h1', {}, titles[mode]), h('p', {}, h('a', { href: `#/compose/${inboxId}/drafts`, id: 'compose-drafts' }, 'Drafts')), form);
  // Focus the first field the member has to fill in.
  const replying = mode === 'reply' || mode === 'reply-all';
  (replying || (mode === 'draft' && to.el.value) ? body : to.el).focus();
  if (replying) body.setSelectionRange(0, 0);
}

const INBOX = 'ibx_[0-9A-Z]{26}';
const MSG = 'msg_[0-9A-Z]{26}';
const DRAFT = 'draft_[A-Za-z0-9_-]{1,100}';
addRoute(new RegExp(`^#/compose/(${INBOX})$`), (m) => composePage(m[1]!, 'new'));
addRoute(new RegExp(`^#/compose/(${INBOX})/(reply|reply-all|forward)/(${MSG})$`), (m) => composePage(m[1]!, m[2] as Mode, m[3]));
addRoute(new RegExp(`^#/compose/(${INBOX})/draft/(${DRAFT})$`), (m) => composePage(m[1]!, 'draft', decodeURIComponent(m[2]!)));
