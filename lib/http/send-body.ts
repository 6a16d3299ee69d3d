// A send body (JSON carrying up to 25 MB of base64) read without holding it three times over.
// JSON.parse of the whole text would need the body's bytes, its text and the parsed string at
// once (about 100 MB for one 25 MB message) before the base64 is even decoded. Instead, every
// long base64 string in the body is decoded in place, into the received bytes, a slice at a time,
// and the rest of the JSON (small) is parsed as usual with a placeholder in its place; the
// route's schema then checks that skeleton, and the route takes the decoded bytes for the field.
// A long string that is not plain base64 (escapes, other characters) is left to JSON.parse.
import { invalid } from '../errors.ts';

/**
 * Strings shorter than this are parsed as usual. Low, so that even a small message's base64
 * skips JSON.parse and the schema's pattern (both walk it character by character in JS).
 */
const LONG = 1024;
/**
 * Base64 decoded per step, a multiple of 4 characters. Small enough that each step's strings
 * live in V8's young generation and die there: a string of a megabyte or more is made an
 * external string (malloc'd outside the heap, freed only when a full GC gets to it), and a 33 MB
 * body decoded a megabyte at a time used to leave some 70 MB of them behind per message.
 */
const STEP = 64 * 1024;

export interface LongField {
  /**
   * What the base64 decodes to: a view of the body's own bytes, decoded in place. (The text was
   * canonical base64, so its bytes' base64 is that text, should it be needed again.)
   */
  bytes: Buffer;
}

/**
 * Decodes the padded standard base64 held in body[start, end) into the start of that same
 * range, and returns a view of the bytes; null when it is not exactly that, with the text left
 * as it was. In place, so a 25 MB message costs no buffer beyond the 33 MB body it came in:
 * three bytes come out of every four characters, so the bytes written never reach the
 * characters still to be read. Node's decoder skips what is not base64, so each step is encoded
 * back and compared: equal only for the alphabet, padding at the very end, and no stray bits (a
 * non-canonical string is left to JSON.parse and the schema, which decide as they always did).
 * All of it native, no JS loop over the bytes.
 */
function decodeInPlace(body: Buffer, start: number, end: number): Buffer | null {
  const length = end - start;
  if (length % 4 !== 0) return null;
  const padding = body[end - 1] === 0x3d ? (body[end - 2] === 0x3d ? 2 : 1) : 0;
  const size = (length / 4) * 3 - padding;
  let written = 0;
  for (let at = start; at < end; at += STEP) {
    const chars = body.toString('latin1', at, Math.min(at + STEP, end));
    const n = body.write(chars, start + written, 'base64');
    if (written + n > size || body.toString('base64', start + written, start + written + n) !== chars) {
      restore(body, start, written, at, chars);
      return null;
    }
    written += n;
  }
  return written === size ? body.subarray(start, start + size) : null;
}

/**
 * Puts back the text of a string whose decoding stopped at `at`: that step's characters, and
 * before them the base64 of the `written` bytes decoded so far (every step before was
 * canonical, so that is their text). Last step first: a step's text lies at or after its
 * bytes, so writing it never overwrites bytes still to be encoded.
 */
function restore(body: Buffer, start: number, written: number, at: number, chars: string): void {
  body.write(chars, at, 'latin1');
  const bytesPerStep = (STEP / 4) * 3;
  for (let from = Math.floor((written - 1) / bytesPerStep) * bytesPerStep; from >= 0; from -= bytesPerStep) {
    const text = body.toString('base64', start + from, start + Math.min(from + bytesPerStep, written));
    body.write(text, start + (from / 3) * 4, 'latin1');
  }
}

/**
 * The parsed body, with each long base64 string replaced by a placeholder key of `fields`.
 * 400 when the body is not JSON (as readJson would). The body's bytes are reused: each long
 * string's text is overwritten by what it decodes to.
 */
export function parseSendBody(body: Buffer): { json: unknown; fields: Map<string, LongField> } {
  const fields = new Map<string, LongField>();
  const parts: Buffer[] = [];
  let copiedTo = 0;
  // Quotes only appear inside strings escaped, so from one string's opening quote, the next
  // unescaped quote closes it and the one after that opens the next string.
  let open = body.indexOf(0x22);
  while (open !== -1) {
    let close = body.indexOf(0x22, open + 1);
    if (close === -1) break; // unterminated: JSON.parse says so
    const escape = body.subarray(open + 1, close).indexOf(0x5c);
    if (escape !== -1) {
      // Escapes: not plain base64; walk to the real end of the string, honouring them.
      let j = open + 1 + escape;
      while (j < body.length && body[j] !== 0x22) j += body[j] === 0x5c ? 2 : 1;
      if (j >= body.length) break;
      close = j;
    } else if (close - open - 1 >= LONG) {
      const bytes = decodeInPlace(body, open + 1, close);
      if (bytes) {
        // A placeholder made of base64 characters, so the schema's checks of the field pass.
        const key = `PoStErNlOnGfIeLd${String(fields.size).padStart(4, '0')}`;
        fields.set(key, { bytes });
        parts.push(body.subarray(copiedTo, open + 1), Buffer.from(key));
        copiedTo = close;
      }
    }
    open = body.indexOf(0x22, close + 1);
  }
  parts.push(body.subarray(copiedTo));
  try {
    return { json: JSON.parse(Buffer.concat(parts).toString('utf8')) as unknown, fields };
  } catch {
    throw invalid('request body is not valid JSON');
  }
}
