// Labels: the API's view of IMAP mailboxes (docs/api.md, "Label"). Ordering and special-use naming live here.
import type { SpecialUse } from '../../schemas/wire.ts';

/** Every SpecialUse (schemas/wire.ts), in the order labels are listed (docs/api.md, "Inboxes"). */
export const SPECIAL_USES = ['\\Sent', '\\Drafts', '\\Trash', '\\Junk', '\\Archive'] as const satisfies readonly SpecialUse[];

export function specialUseOf(attributes: Iterable<string>): SpecialUse | null {
  const lower = new Set([...attributes].map((a) => a.toLowerCase()));
  return SPECIAL_USES.find((u) => lower.has(u.toLowerCase())) ?? null;
}

export interface LabelOrderKey {
  path: string;
  specialUse: SpecialUse | null;
}

// "By name" as people read names: case and accents second, then code points for a total order.
const byName = new Intl.Collator('en', { sensitivity: 'base', numeric: true });

/** docs/api.md, "Inboxes": INBOX first, then Sent, Drafts, Trash, Spam (Junk), Archive, then the rest by name. */
export function compareLabels(a: LabelOrderKey, b: LabelOrderKey): number {
  const rank = (l: LabelOrderKey): number => {
    if (l.path.toUpperCase() === 'INBOX') return 0;
    if (l.specialUse) return 1 + SPECIAL_USES.indexOf(l.specialUse);
    return 99;
  };
  return rank(a) - rank(b) || byName.compare(a.path, b.path) || (a.path < b.path ? -1 : a.path > b.path ? 1 : 0);
}
