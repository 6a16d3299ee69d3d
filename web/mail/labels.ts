// How a label is shown (docs/app.md, "Labels"): "Inbox" for INBOX, special-use folders by their
// role whatever the server calls them ("[Gmail]/Sent Mail" is "Sent"), nested folders by their last
// name, indented one step per level, and a small icon for each. Icons are SVG made with DOM calls:
// no markup from strings and nothing fetched.
import type { InboxGrant, Label, SpecialUse } from '../../schemas/wire.ts';

/**
 * The hierarchy delimiter. The API gives a label's full IMAP name but not the delimiter; the
 * Dovecot Postern ships with uses "/" (docker/dovecot/dovecot.conf, `separator = /`).
 */
export const DELIMITER = '/';

const ROLE_NAMES: Record<SpecialUse, string> = {
  '\\Sent': 'Sent',
  '\\Drafts': 'Drafts',
  '\\Trash': 'Trash',
  '\\Junk': 'Junk',
  '\\Archive': 'Archive',
};

const isInbox = (l: Pick<Label, 'name'>) => l.name.toUpperCase() === 'INBOX';

/** The name people see. */
export function labelName(l: Pick<Label, 'name' | 'specialUse'>): string {
  if (isInbox(l)) return 'Inbox';
  if (l.specialUse) return ROLE_NAMES[l.specialUse];
  const parts = l.name.split(DELIMITER).filter((p) => p !== '');
  return parts[parts.length - 1] ?? l.name;
}

/** How many levels down the hierarchy: 0 for top-level folders, the inbox and special-use ones. */
export function labelDepth(l: Pick<Label, 'name' | 'specialUse'>): number {
  if (isInbox(l) || l.specialUse) return 0;
  return Math.max(0, l.name.split(DELIMITER).filter((p) => p !== '').length - 1);
}

/** Paths of a 24-unit icon, drawn with strokes (currentColor: they follow the text, light or dark). */
const ICONS: Record<string, string[]> = {
  inbox: ['M3 13h5l1.5 3h5l1.5-3h5', 'M5 5h14l2 8v6H3v-6z'],
  '\\Sent': ['M3 11l18-8-8 18-2-8z', 'M11 13l10-10'],
  '\\Drafts': ['M4 20h4L19 9l-4-4L4 16z', 'M13 7l4 4'],
  '\\Trash': ['M4 7h16', 'M9 7V4h6v3', 'M6 7l1 13h10l1-13'],
  '\\Junk': ['M12 3l10 18H2z', 'M12 10v5', 'M12 17.5v.5'],
  '\\Archive': ['M3 4h18v4H3z', 'M5 8v12h14V8', 'M10 12h4'],
  folder: ['M3 6h6l2 2h10v11H3z'],
};

/** The label's icon, hidden from screen readers (its name says what it is). */
export function labelIcon(l: Pick<Label, 'name' | 'specialUse'>): SVGSVGElement {
  const NS = 'http://www.w3.org/2000/svg';
  const kind = isInbox(l) ? 'inbox' : (l.specialUse ?? 'folder');
  const svg = document.createElementNS(NS, 'svg');
  for (const [k, v] of Object.entries({
    class: 'icon',
    viewBox: '0 0 24 24',
    width: '16',
    height: '16',
    'aria-hidden': 'true',
    focusable: 'false',
    'data-icon': kind,
  }))
    svg.setAttribute(k, v);
  for (const d of ICONS[kind] ?? ICONS.folder!) {
    const path = document.createElementNS(NS, 'path');
    path.setAttribute('d', d);
    svg.append(path);
  }
  return svg;
}

/**
 * The inbox's mode as what the server can and cannot read (docs/encryption.md, "What an operator
 * can and cannot read"), for a member rather than an engineer; null when the server does not say.
 */
export function modeWords(mode: InboxGrant['mode']): { name: string; says: string } | null {
  if (mode === 'zero-access')
    return {
      name: 'Private',
      says: 'Messages and attachments are stored encrypted and open only in your browser; the server never opens them. Senders, recipients, subjects and dates stay readable to it, to list and search your mail.',
    };
  if (mode === 'compatible')
    return {
      name: 'Standard',
      says: 'The server can read these messages, so any mail app and searching message text work with them.',
    };
  return null;
}
