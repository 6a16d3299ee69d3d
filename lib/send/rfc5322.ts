// The few things sending needs from an RFC 5322 message's header block, done on the bytes so
// everything else (the body, every other header, line endings) is relayed exactly as given.
import addressparser from 'nodemailer/lib/addressparser';

export interface HeaderBlock {
  /** Bytes of the header block, up to and including the blank line (empty when there is none). */
  head: Buffer;
  body: Buffer;
}

/** Splits at the first empty line (CRLF CRLF or LF LF); a message of headers only has no body. */
export function splitHeader(raw: Buffer): HeaderBlock {
  for (let i = 0; i < raw.length; i++) {
    if (raw[i] !== 0x0a) continue;
    // A line feed followed by an empty line (LF or CRLF) ends the header block.
    if (raw[i + 1] === 0x0a) return { head: raw.subarray(0, i + 2), body: raw.subarray(i + 2) };
    if (raw[i + 1] === 0x0d && raw[i + 2] === 0x0a) return { head: raw.subarray(0, i + 3), body: raw.subarray(i + 3) };
  }
  // No empty line: the whole message is headers (RFC 5322 allows no body).
  return { head: raw, body: Buffer.alloc(0) };
}

interface Field {
  name: string;
  /** Byte range of the whole field, continuation lines and line ending included. */
  start: number;
  end: number;
}

/** The header fields in order; a line that is neither a field nor a continuation ends the list. */
function fields(head: Buffer): Field[] {
  const out: Field[] = [];
  let pos = 0;
  while (pos < head.length) {
    let end = head.indexOf(0x0a, pos);
    end = end < 0 ? head.length : end + 1;
    const first = head[pos];
    if (first === 0x20 || first === 0x09) {
      // Folded: belongs to the field before it.
      const last = out.at(-1);
      // A continuation line before any field: this is not a header block.
      if (!last) break;
      last.end = end;
    } else {
      const colon = head.indexOf(0x3a, pos);
      if (colon < 0 || colon >= end) break;
      // A field name is printable ASCII without spaces (RFC 5322 3.6.8; obsolete syntax allows
      // blanks before the colon). Anything else, such as an mbox "From " line, is not a header.
      const name = head.toString('latin1', pos, colon).replace(/[ \t]+$/, '');
      if (!/^[\x21-\x39\x3b-\x7e]+$/.test(name)) break;
      out.push({ name: name.toLowerCase(), start: pos, end });
    }
    pos = end;
  }
  return out;
}

/** The unfolded value of each field with this name. Header bytes are read as UTF-8 (RFC 6532). */
export function headerValues(head: Buffer, name: string): string[] {
  const wanted = name.toLowerCase();
  return fields(head)
    .filter((f) => f.name === wanted)
    .map((f) => {
      const text = head.toString('utf8', f.start, f.end);
      return text.slice(text.indexOf(':') + 1).replace(/\r?\n[ \t]/g, ' ').trim();
    });
}

/**
 * The bare address of the From header, lower case: null when there is not exactly one From
 * field holding exactly one mailbox (RFC 5322 allows several authors, but then Sender rules
 * apply, and a message sent from an inbox has one).
 */
export function fromAddress(head: Buffer): string | null {
  // A header block that is not all fields (an mbox "From " line first, say) is not a message.
  if (fields(head).at(-1)?.end !== head.length - blankLineLength(head)) return null;
  const values = headerValues(head, 'from');
  if (values.length !== 1) return null;
  const parsed = addressparser(values[0]!, { flatten: true });
  if (parsed.length !== 1 || !parsed[0]!.address) return null;
  return parsed[0]!.address.toLowerCase();
}

/** The length of the empty line that ends a header block (0 when the message has no body). */
function blankLineLength(head: Buffer): number {
  if (head.length >= 2 && head[head.length - 1] === 0x0a && head[head.length - 2] === 0x0a) return 1;
  if (head.length >= 3 && head[head.length - 1] === 0x0a && head[head.length - 2] === 0x0d && head[head.length - 3] === 0x0a) return 2;
  return 0;
}

/** The head with every field of this name removed (Bcc, before relaying). */
export function withoutField(head: Buffer, name: string): Buffer {
  const wanted = name.toLowerCase();
  const drop = fields(head).filter((f) => f.name === wanted);
  if (drop.length === 0) return head;
  const parts: Buffer[] = [];
  let pos = 0;
  for (const f of drop) {
    parts.push(head.subarray(pos, f.start));
    pos = f.end;
  }
  parts.push(head.subarray(pos));
  return Buffer.concat(parts);
}

/** The line ending the message uses (its first line's), so added fields match it. */
export function lineEnding(head: Buffer): string {
  const lf = head.indexOf(0x0a);
  return lf > 0 && head[lf - 1] === 0x0d ? '\r\n' : '\n';
}
