// The message screen, `#/inbox/<ibx>/message/<msg>`: opened in this browser (open.ts), parsed
// with postal-mime, text shown as text, HTML in a sandboxed frame (html.ts) with remote images
// blocked until the member asks, attachments saved from the decrypted parts, and the three
// flags the API can change (docs/api.md, "Message flags"). Opening marks it seen, as a mail app does. The inbox
// stream (shared with the inbox screen, live.ts) keeps the flags current and says when the
// message is removed; plaintext a mail app put in a zero-access inbox waits here for its sealed
// copy (sealing.ts).
import PostalMime, { type Address, type Attachment } from 'postal-mime';
import type { Flag, FlagChange, FlagsResponse, LabelList, MessageDetail, WebFlag } from '../../schemas/wire.ts';
import { api, ApiError, SIGNED_OUT } from '../api.ts';
import { timeElement } from '../dates.ts';
import { addRoute, navigate } from '../routes.ts';
import { button, h, report, show, type Child } from '../ui.ts';
import { ActionRefused, applyChange, deletesForever, plan, type Action, type Plan } from './actions.ts';
import { labelName } from './labels.ts';
import { backFromMessage, listedMessage } from './list.ts';
import { panesFor, showInReader, type Panes } from './panes.ts';
import { offer } from './undo.ts';
import { subscribeWhileOn } from './live.ts';
import { messageDetail, openMessage } from './open.ts';
import { awaitResealing } from './resealing.ts';
import { applyStyles, fitToContent, prepareHtml, type PreparedHtml } from './html.ts';

/**
 * The object URLs of the message on screen (its decrypted attachments). A blob: URL resolves
 * anywhere in this origin until revoked, so they go as soon as the member leaves the message or
 * the session ends, not when the next message opens.
 */
let objectUrls: string[] = [];
let objectUrlsHash = '';
const revokeObjectUrls = () => {
  for (const url of objectUrls) URL.revokeObjectURL(url);
  objectUrls = [];
};
window.addEventListener('hashchange', () => {
  if (location.hash !== objectUrlsHash) revokeObjectUrls();
});
window.addEventListener(SIGNED_OUT, revokeObjectUrls);

/**
 * The sender chose the name: no path, no control characters, and no bidirectional controls, which
 * would let "invoice\u202Efdp.exe" read as "invoiceexe.pdf" here and in the save dialog.
 */
export function safeFilename(name: string | null | undefined, index: number): string {
  const clean = (name ?? '')
    .replace(/[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g, '')
    .replace(/[/\\:]/g, '_')
    .replace(/^[\s.]+|[\s.]+$/g, '')
    .slice(0, 200);
  return clean || `attachment-${index + 1}`;
}

const addresses = (list: Address[] | Address | undefined): string =>
  (Array.isArray(list) ? list : list ? [list] : [])
    .flatMap((a) => (a.group ? a.group : [a]))
    .map((a) => (a.name ? `${a.name} <${a.address}>` : a.address))
    .join(', ');

function saveLink(part: Attachment, index: number): HTMLAnchorElement {
  const content = typeof part.content === 'string' ? new TextEncoder().encode(part.content) : part.content;
  // application/octet-stream: the browser saves it rather than rendering it in the app's origin.
  const url = URL.createObjectURL(new Blob([content as BlobPart], { type: 'application/octet-stream' }));
  objectUrls.push(url);
  const name = safeFilename(part.filename, index);
  const size = typeof part.content === 'string' ? part.content.length : part.content.byteLength;
  return h(
    'a',
    { href: url, download: name, class: 'attachment', 'data-attachment': String(index) },
    `${name} (${part.mimeType}, ${size.toLocaleString()} bytes)`,
  );
}

/** Shown where the message was: it is gone from the inbox (expunged by a mail app or another device). */
function removedNotice(): HTMLElement {
  return h(
    'p',
    { class: 'notice', id: 'message-removed', role: 'alert' },
    'This message was removed from the inbox (by a mail app or another device). What is shown is what was open here.',
  );
}

/**
 * Archive, delete, junk, unread and move for the message shown (actions.ts), and in the reading
 * pane of Trash or Junk, delete forever (asked first). In the reading pane
 * the list does them (at once, with Undo) and the pane closes onto the next row; shown on its own,
 * the change is made here and the screen goes back to the list, with Undo offered there too. A
 * conversation open in the reading pane has them too (`msgId` its row): the list acts on all of it.
 */
export function messageActions(inboxId: string, msgId: string, panes: Panes | null, backHash: string, what = 'This message'): HTMLElement {
  const run = async (action: Action, target?: string) => {
    if (panes) {
      const next = action === 'unread' ? msgId : panes.control.neighbour(msgId, 1);
      const done = panes.control.act(action, [msgId], target);
      panes.returnTo = next;
      navigate(panes.listHash);
      return done;
    }
    const { labels } = await api<LabelList>('GET', `/inboxes/${inboxId}/labels`);
    const listed = listedMessage(msgId)?.labelId;
    const label = labels.find((l) => l.id === listed) ?? labels[0]!;
    let p: Plan;
    try {
      p = plan(action, label, labels, target);
    } catch (err) {
      if (err instanceof ActionRefused) return offer(err.message);
      throw err;
    }
    await applyChange(inboxId, [msgId], p.change);
    const undo = p.undo;
    offer(p.done(1), undo ? () => applyChange(inboxId, [msgId], undo).then(() => undefined) : undefined);
    navigate(backHash);
  };
  const labels = panes?.control.labels() ?? [];
  const junk = panes?.control.label().specialUse === '\\Junk' ? 'not-junk' : 'junk';
  const moveTo = h(
    'select',
    { id: 'msg-move-to', 'aria-label': 'Move this message to' },
    h('option', { value: '' }, 'Move to…'),
    ...(panes?.control.moveTargets() ?? []).map((l) => h('option', { value: l.id }, l.name)),
  );
  return h(
    'div',
    { class: 'actions', id: 'message-actions', role: 'group', 'aria-label': what },
    button('Archive', () => run('archive'), { class: 'secondary', id: 'msg-archive' }),
    button('Delete', () => run('trash'), { class: 'secondary', id: 'msg-trash' }),
    panes && deletesForever(panes.control.label())
      ? button(
          'Delete forever',
          () => {
            const next = panes.control.neighbour(msgId, 1);
            return panes.control.deleteForever([msgId], () => {
              panes.returnTo = next;
              navigate(panes.listHash);
            });
          },
          { class: 'secondary', id: 'msg-destroy' },
        )
      : null,
    button(junk === 'junk' ? 'Junk' : 'Not junk', () => run(junk), { class: 'secondary', id: 'msg-junk' }),
    button('Mark unread', () => run('unread'), { class: 'secondary', id: 'msg-unread' }),
    labels.length > 0
      ? h(
          'span',
          { class: 'move' },
          moveTo,
          button('Move', () => run('move', moveTo.value), { class: 'secondary', id: 'msg-move' }),
        )
      : null,
  );
}

/** Where a screen of the message goes: the list's reading pane when it is up, else the page. */
function screenOf(inboxId: string, msgId: string): { panes: Panes | null; display: (...children: Child[]) => void } {
  const panes = panesFor(inboxId);
  return { panes, display: panes ? (...children) => showInReader(panes, msgId, ...children) : show };
}

async function messageScreen(inboxId: string, msgId: string): Promise<void> {
  revokeObjectUrls();
  const { panes, display } = screenOf(inboxId, msgId);
  const from = panes ? { hash: panes.listHash, name: labelName(panes.control.label()) } : backFromMessage(inboxId);
  const back = h('p', {}, h('a', { href: from.hash, id: 'back' }, `← Back to ${from.name}`));
  display(back, h('h1', {}, 'Opening the message…'), h('p', { class: 'muted' }, 'Decrypting it in this browser.'));
  const hash = location.hash;
  const gone = () => display(back, h('h1', {}, 'Message removed'), removedNotice());
  let detail: MessageDetail;
  try {
    detail = await messageDetail(inboxId, msgId);
  } catch (err) {
    if (location.hash !== hash) return;
    // Plaintext a mail app appended to a zero-access inbox: Postern seals it in a moment.
    if (err instanceof ApiError && err.status === 422) return awaitResealing(inboxId, msgId, hash, back, err.message, display);
    if (err instanceof ApiError && err.status === 404) return gone();
    throw err;
  }

  // Live from here on, so a change made while the message decrypts is not missed.
  let flags = new Set<Flag>(detail.message.flags);
  let removed = false;
  let drawFlags = () => undefined as void;
  let drawRemoved = () => undefined as void;
  const reread = async () => {
    try {
      const fresh = await messageDetail(inboxId, msgId);
      flags = new Set(fresh.message.flags);
      drawFlags();
    } catch (err) {
      // A removal from one label is a move when the message is still in the inbox.
      if (!(err instanceof ApiError && err.status === 404)) return;
      removed = true;
      drawRemoved();
    }
  };
  let subscribing = true;
  subscribeWhileOn(hash, inboxId, {
    // A stream connected after the detail was read, or reconnected, may have missed changes.
    onOpen: () => {
      if (!subscribing) void reread();
    },
    onChange: (change) => {
      if (change.msgId !== msgId) return;
      if (change.type === 'message.flags' && change.flags) {
        flags = new Set(change.flags);
        drawFlags();
      } else if (change.type === 'message.removed') {
        void reread();
      }
    },
  });
  subscribing = false;

  let raw: Uint8Array;
  try {
    raw = await openMessage(inboxId, msgId, detail);
  } catch (err) {
    if (location.hash !== hash) return;
    if (err instanceof ApiError && err.status === 404) return gone();
    throw err;
  }
  const email = await PostalMime.parse(raw);
  if (location.hash !== hash) return;
  objectUrlsHash = hash;

  const setFlags = async (change: FlagChange) => {
    const res = await api<FlagsResponse>('POST', `/inboxes/${inboxId}/messages/${msgId}/flags`, change);
    flags = new Set(res.flags);
    drawFlags();
  };
  // Toggle buttons (WAI-ARIA: a fixed label, the state in aria-pressed). They stay the same
  // elements as their state changes, so keyboard focus stays on them.
  const toggles = h('div', { class: 'actions', id: 'flag-actions', role: 'group', 'aria-label': 'Flags' });
  const toggleOf = (flag: WebFlag, label: string) => {
    const b = button(label, () => setFlags(flags.has(flag) ? { remove: [flag] } : { add: [flag] }), {
      class: 'secondary toggle',
      id: `toggle-${flag}`,
    });
    return { b, draw: () => b.setAttribute('aria-pressed', String(flags.has(flag))) };
  };
  const buttons = [toggleOf('flagged', 'Flagged'), toggleOf('seen', 'Read'), toggleOf('answered', 'Answered')];
  toggles.append(...buttons.map((t) => t.b));
  drawFlags = () => {
    for (const t of buttons) t.draw();
    toggles.dataset.flags = [...flags].sort().join(' ');
  };
  drawFlags();
  drawRemoved = () => {
    if (location.hash !== hash || document.getElementById('message-removed')) return;
    // Its flags can no longer change; the decrypted copy stays readable (and its attachments savable).
    toggles.remove();
    back.after(removedNotice());
  };

  // Parts the HTML shows by cid: are not listed again as attachments.
  const attachments = email.attachments.map((part, i) => ({ part, i })).filter(({ part }) => !(part.related && email.html));
  const body = h('div', { class: 'body', id: 'message-body' });
  if (email.html) {
    // allow-same-origin only so the app can style it through CSSOM (html.ts); never allow-scripts.
    const frame = h('iframe', {
      id: 'message-html',
      title: 'Message content',
      sandbox: 'allow-same-origin allow-popups allow-popups-to-escape-sandbox',
      referrerpolicy: 'no-referrer',
    });
    let shown: PreparedHtml | null = null;
    frame.addEventListener('load', () => {
      if (shown) applyStyles(frame, shown.styles);
      frame.dataset.styled = 'true';
      fitToContent(frame);
    });
    const render = (remote: boolean) => {
      shown = prepareHtml(email.html!, email.attachments, remote);
      delete frame.dataset.styled;
      delete frame.dataset.sized;
      frame.srcdoc = shown.srcdoc;
      return shown;
    };
    const { remoteImages } = render(false);
    if (remoteImages > 0)
      body.append(
        h(
          'p',
          { class: 'notice', id: 'remote-notice' },
          `Remote images are blocked (${remoteImages}): loading them tells the sender you opened this message. `,
          button(
            'Show images',
            () => {
              render(true);
              document.getElementById('remote-notice')?.remove();
            },
            { class: 'secondary', id: 'show-images' },
          ),
        ),
      );
    body.append(frame);
  } else {
    body.append(h('pre', { class: 'text', id: 'message-text' }, email.text ?? ''));
  }

  display(
    back,
    h('h1', { id: 'message-subject' }, email.subject ?? detail.message.subject ?? '(no subject)'),
    h(
      'dl',
      { class: 'headers' },
      h('dt', {}, 'From'),
      h('dd', { id: 'message-from' }, addresses(email.from) || detail.message.from || ''),
      h('dt', {}, 'To'),
      h('dd', {}, addresses(email.to) || detail.message.to || ''),
      email.cc ? h('dt', {}, 'Cc') : null,
      email.cc ? h('dd', {}, addresses(email.cc)) : null,
      h('dt', {}, 'Date'),
      h('dd', { id: 'message-date' }, timeElement(email.date ?? detail.message.receivedAt)),
    ),
    h(
      'div',
      { class: 'actions' },
      h('a', { class: 'button', href: `#/compose/${inboxId}/reply/${msgId}`, id: 'reply' }, 'Reply'),
      h('a', { class: 'button secondary', href: `#/compose/${inboxId}/reply-all/${msgId}`, id: 'reply-all' }, 'Reply all'),
      h('a', { class: 'button secondary', href: `#/compose/${inboxId}/forward/${msgId}`, id: 'forward' }, 'Forward'),
    ),
    messageActions(inboxId, msgId, panes, from.hash),
    toggles,
    body,
    attachments.length > 0 ? h('h2', {}, 'Attachments') : null,
    attachments.length > 0
      ? h('ul', { class: 'list', id: 'attachments' }, ...attachments.map(({ part, i }) => h('li', {}, saveLink(part, i))))
      : null,
  );
  if (removed) drawRemoved();
  // Opening it reads it, as in a mail app; a failure here leaves the message readable.
  else if (!flags.has('seen')) await setFlags({ add: ['seen'] }).catch(report);
}

addRoute(/^#\/inbox\/(ibx_[0-9A-Z]{26})\/message\/(msg_[0-9A-Z]{26})$/, (m) => messageScreen(m[1]!, m[2]!));
