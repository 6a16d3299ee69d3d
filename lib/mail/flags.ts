// The one mapping between IMAP flags and keywords and the API's neutral flag names (docs/api.md, "Flag and WebFlag").
// Both directions live here so a mail app and the API can never disagree about a flag.
import type { Flag } from '../../schemas/wire.ts';

/** Every Flag (schemas/wire.ts), in the order the API lists them. */
export const FLAGS = ['seen', 'answered', 'flagged', 'draft', 'forwarded', 'junk', 'not_junk'] as const satisfies readonly Flag[];

// IMAP keywords are case-insensitive (RFC 3501 2.3.2); keys here are lower case.
const FROM_IMAP: ReadonlyMap<string, Flag> = new Map<string, Flag>([
  ['\\seen', 'seen'],
  ['\\answered', 'answered'],
  ['\\flagged', 'flagged'],
  ['\\draft', 'draft'],
  ['$forwarded', 'forwarded'],
  ['$junk', 'junk'],
  ['junk', 'junk'],
  ['$notjunk', 'not_junk'],
  ['nonjunk', 'not_junk'],
]);

/** What Postern writes for each flag: the registered spelling (RFC 5788 / RFC 3501). */
const TO_IMAP: Readonly<Record<Flag, string>> = {
  seen: '\\Seen',
  answered: '\\Answered',
  flagged: '\\Flagged',
  draft: '\\Draft',
  forwarded: '$Forwarded',
  junk: '$Junk',
  not_junk: '$NotJunk',
};

// Session and server-internal flags that are not message state a caller can use.
const HIDDEN = new Set(['\\recent', '\\deleted']);

export interface MappedFlags {
  /** In the order of FLAGS. */
  flags: Flag[];
  /** Other keywords as the mail app spelled them, sorted. */
  keywords: string[];
}

export function fromImapFlags(imapFlags: Iterable<string>): MappedFlags {
  const flags = new Set<Flag>();
  const keywords = new Set<string>();
  for (const raw of imapFlags) {
    const lower = raw.toLowerCase();
    const mapped = FROM_IMAP.get(lower);
    if (mapped) flags.add(mapped);
    else if (!HIDDEN.has(lower) && !raw.startsWith('\\')) keywords.add(raw);
  }
  return { flags: FLAGS.filter((f) => flags.has(f)), keywords: [...keywords].sort() };
}

export function toImapFlag(flag: Flag): string {
  return TO_IMAP[flag];
}

/** IMAP flags in a canonical order, for storage and comparison. */
export function normalizeImapFlags(imapFlags: Iterable<string>): string[] {
  return [...new Set([...imapFlags].filter((f) => f.toLowerCase() !== '\\recent'))].sort();
}

/** Every IMAP spelling that means `flag` (lower case), for matching stored flags. */
export function imapSpellings(flag: string): string[] {
  return [...FROM_IMAP].filter(([, f]) => f === flag).map(([imap]) => imap);
}
