// Reads a delivery status notification (RFC 3464: multipart/report with a message/delivery-status
// part): the envelope id it names and what happened to each recipient. Only the fields matching
// needs; anything else in the report is left alone.

export interface DsnRecipient {
  recipient: string;
  action: string;
  /** Enhanced status code, e.g. 5.1.1. */
  status: string;
  /** The remote server's words, when the report has them. */
  diagnostic: string | null;
}

export interface Dsn {
  envid: string | null;
  recipients: DsnRecipient[];
}

/** Header-style fields of one block, names lower case, continuation lines unfolded. */
function fieldsOf(block: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of block.replace(/\r?\n[ \t]+/g, ' ').split(/\r?\n/)) {
    const colon = line.indexOf(':');
    if (colon > 0) out.set(line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim());
  }
  return out;
}

/** "rfc822; user@example.org" → "user@example.org". */
const afterType = (value: string): string => value.replace(/^[^;]*;\s*/, '').trim();

/** RFC 3461 xtext: "+XX" is the byte with hex value XX. */
const xtextDecode = (s: string): string =>
  s.replace(/\+([0-9A-Fa-f]{2})/g, (_m, hex: string) => String.fromCharCode(Number.parseInt(hex, 16)));

/** The report in a message, or null when it holds no delivery-status part. */
export function parseDsn(raw: Buffer): Dsn | null {
  const text = raw.toString('latin1');
  const type = /content-type:\s*message\/delivery-status[^\n]*\r?\n/i.exec(text);
  if (!type) return null;
  // The part's own header ends at its first empty line; its body at the next boundary.
  const headerEnd = /\r?\n\r?\n/.exec(text.slice(type.index));
  if (!headerEnd) return null;
  const start = type.index + headerEnd.index + headerEnd[0].length;
  const boundary = /\r?\n--/.exec(text.slice(start));
  const body = text.slice(start, boundary ? start + boundary.index : undefined);
  // Per-message fields first, then one block per recipient, separated by empty lines.
  const [messageBlock = '', ...recipientBlocks] = body.split(/\r?\n\s*\r?\n/);
  const perMessage = fieldsOf(messageBlock);
  const envid = perMessage.get('original-envelope-id');
  const recipients: DsnRecipient[] = [];
  for (const block of recipientBlocks) {
    const f = fieldsOf(block);
    const final = f.get('final-recipient') ?? f.get('original-recipient');
    if (!final) continue;
    recipients.push({
      recipient: afterType(final),
      action: (f.get('action') ?? '').toLowerCase(),
      status: f.get('status') ?? '',
      diagnostic: f.has('diagnostic-code') ? afterType(f.get('diagnostic-code')!) : null,
    });
  }
  return { envid: envid ? xtextDecode(envid) : null, recipients };
}
