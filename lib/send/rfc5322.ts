// The few things sending needs from an RFC 5322 message's header block, done on the bytes so
// everything else (the body, every other header, line endings) is relayed exactly as given.

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
      return text
        .slice(text.indexOf(':') + 1)
        .replace(/\r?\n[ \t]/g, ' ')
        .trim();
    });
}

/**
 * The bare address of the From header, lower case: null when there is not exactly one From
 * field holding exactly one well-formed mailbox (RFC 5322 allows several authors, but then
 * Sender rules apply, and a message sent from an inbox has one). Strict, because what a mail
 * app shows as the author must be what was checked: a lenient parser reads
 * `ceo@corp.example <demo@…` as demo@… while the reader sees the CEO.
 */
export function fromAddress(head: Buffer): string | null {
  // A header block that is not all fields (an mbox "From " line first, say) is not a message.
  const all = fields(head);
  if (all.at(-1)?.end !== head.length - blankLineLength(head)) return null;
  const from = all.filter((f) => f.name === 'from');
  if (from.length !== 1) return null;
  // Header bytes are UTF-8 (RFC 6532). Old mail has Latin-1 display names: a byte that is not
  // UTF-8 decodes to U+FFFD (never swallowing the ASCII after it), refused in the address only.
  const text = head.toString('utf8', from[0]!.start, from[0]!.end);
  // Drop the field's own line ending and unfold (a line break followed by a blank); any CR,
  // LF or NUL left is not folding and makes the field malformed.
  const value = text
    .slice(text.indexOf(':') + 1)
    .replace(/\r?\n$/, '')
    .replace(/\r?\n(?=[ \t])/g, '');
  return mailbox(value);
}

// RFC 5322 3.2.3 atext, with RFC 6532's non-ASCII UTF-8.
const ATEXT = /[A-Za-z0-9!#$%&'*+\-/=?^_`{|}~\u0080-\u{10FFFF}]/u;
const DOT_ATOM_TEXT = /^[A-Za-z0-9!#$%&'*+\-/=?^_`{|}~\u0080-\u{10FFFF}]+(?:\.[A-Za-z0-9!#$%&'*+\-/=?^_`{|}~\u0080-\u{10FFFF}]+)*$/u;
/** Nested comments deeper than this are refused rather than followed. */
const MAX_COMMENT_DEPTH = 16;

/**
 * A mailbox list holding exactly one mailbox (RFC 5322 3.4: name-addr or addr-spec, with
 * comments and folding white space), as its lower-case address; null for anything else.
 * Of the obsolete forms only the display name's periods (`John Q. Public`) are taken: routes,
 * CFWS inside a local part, empty list elements and control characters are not.
 */
function mailbox(value: string): string | null {
  // Controls other than the tab never appear in a well-formed field (obs-NO-WS-CTL is refused).
  if (/[\u0000-\u0008\u000a-\u001f\u007f]/.test(value)) return null;
  const p = new Parser(value);
  const start = p.pos;
  // name-addr: an optional display name (a phrase), then <addr-spec>.
  let words = 0;
  p.cfws();
  for (;;) {
    if (p.peek() === '"') {
      if (p.quoted() === null) return null;
    } else if (p.atom() !== null) {
      // An atom.
    } else if (p.peek() === '.' && words > 0) {
      p.pos++;
    } else {
      break;
    }
    words++;
    if (!p.cfws()) return null;
  }
  let address: string | null;
  if (p.peek() === '<') {
    p.pos++;
    address = p.addrSpec();
    if (address === null || p.peek() !== '>') return null;
    p.pos++;
  } else {
    // No angle bracket: the whole is a bare addr-spec.
    p.pos = start;
    address = p.addrSpec();
  }
  if (address === null || !p.cfws() || p.pos !== value.length || address.includes('\ufffd')) return null;
  return address.toLowerCase();
}

class Parser {
  pos = 0;
  constructor(private readonly s: string) {}

  peek(): string | undefined {
    return this.s[this.pos];
  }

  /** Skips folding white space and comments; false for a comment that never closes. */
  cfws(): boolean {
    for (;;) {
      const c = this.peek();
      if (c === ' ' || c === '\t') this.pos++;
      else if (c === '(') {
        if (!this.comment()) return false;
      } else return true;
    }
  }

  private comment(): boolean {
    let depth = 0;
    while (this.pos < this.s.length) {
      const c = this.s[this.pos++];
      if (c === '(') {
        if (++depth > MAX_COMMENT_DEPTH) return false;
      } else if (c === ')') {
        if (--depth === 0) return true;
      } else if (c === '\\') {
        // quoted-pair: a backslash quotes one visible character or blank.
        if (this.pos >= this.s.length) return false;
        this.pos++;
      }
    }
    return false;
  }

  /** 1*atext, or null (nothing taken). */
  atom(): string | null {
    const from = this.pos;
    while (this.pos < this.s.length) {
      const cp = this.s.codePointAt(this.pos)!;
      const ch = String.fromCodePoint(cp);
      if (!ATEXT.test(ch)) break;
      this.pos += ch.length;
    }
    return this.pos > from ? this.s.slice(from, this.pos) : null;
  }

  /** A quoted-string at the position (its DQUOTE first), unquoted; null when it never closes. */
  quoted(): string | null {
    let out = '';
    this.pos++;
    while (this.pos < this.s.length) {
      const c = this.s[this.pos++]!;
      if (c === '"') return out;
      if (c === '\\') {
        if (this.pos >= this.s.length) return null;
        out += this.s[this.pos++];
      } else out += c;
    }
    return null;
  }

  /**
   * local-part "@" domain, each a dot-atom (CFWS only around it) or a quoted-string / domain
   * literal; the address as written, a quoted local part unquoted when it needs no quotes.
   */
  addrSpec(): string | null {
    if (!this.cfws()) return null;
    let local: string | null;
    if (this.peek() === '"') {
      const text = this.quoted();
      if (text === null) return null;
      local = DOT_ATOM_TEXT.test(text) ? text : `"${text.replace(/["\\]/g, '\\$&')}"`;
    } else {
      local = this.dotAtom();
    }
    if (local === null || !this.cfws() || this.peek() !== '@') return null;
    this.pos++;
    if (!this.cfws()) return null;
    let domain: string | null;
    if (this.peek() === '[') {
      const end = this.s.indexOf(']', this.pos);
      if (end < 0) return null;
      domain = this.s.slice(this.pos, end + 1);
      // dtext (RFC 5322 3.4.1): visible characters but [ ] and \.
      if (!/^\[[ \t]*(?:[\x21-\x5a\x5e-\x7e\u0080-\u{10FFFF}]+[ \t]*)*\]$/u.test(domain)) return null;
      domain = domain.replace(/[ \t]/g, '');
      this.pos = end + 1;
    } else {
      domain = this.dotAtom();
    }
    if (domain === null || !this.cfws()) return null;
    return `${local}@${domain}`;
  }

  private dotAtom(): string | null {
    let text = this.atom();
    if (text === null) return null;
    while (this.peek() === '.') {
      this.pos++;
      const next = this.atom();
      if (next === null) return null;
      text += `.${next}`;
    }
    return text;
  }
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
