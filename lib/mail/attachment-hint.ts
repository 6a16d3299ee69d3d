// Whether a message carries attachments, told from its top-level Content-Type alone (the one
// header the index sync already fetches): search's `hasAttachment` (docs/search.md).
import { isPgpMime } from './sealing.ts';

/**
 * multipart/mixed (a body with files beside it) or a single part that is not text or a
 * multipart (a PDF sent bare): true. Text, multipart/alternative or related, a report: false.
 * PGP/MIME: null, the server cannot see inside.
 */
export function hasAttachmentHint(header: Uint8Array): boolean | null {
  if (isPgpMime(header)) return null;
  const unfolded = Buffer.from(header)
    .toString('latin1')
    .replace(/\r?\n[ \t]+/g, ' ');
  const m = /^content-type:[ \t]*([a-z0-9!#$&^_.+-]+)\/([a-z0-9!#$&^_.+-]+)/im.exec(unfolded);
  // No Content-Type: text/plain (RFC 2045 5.2).
  if (!m) return false;
  const type = m[1]!.toLowerCase();
  const subtype = m[2]!.toLowerCase();
  if (type === 'multipart') return subtype === 'mixed';
  return type !== 'text' && type !== 'message';
}
