// A send body (JSON carrying up to 25 MB of base64) read without holding it three times over.
// JSON.parse of the whole text would need the body's bytes, its text and the parsed string at
// once (about 100 MB for one 25 MB message) before the base64 is even decoded. Instead, every
// long base64 string in the body is decoded straight from the received bytes, a slice at a time,
// and the rest of the JSON (small) is parsed as usual with a placeholder in its place; the
// route's schema then checks that skeleton, and the route takes the decoded bytes for the field.
// A long string that is not plain base64 (escapes, other characters) is left to JSON.parse.
import { badRequest } from '../errors.ts';

/**
 * Strings shorter than this are parsed as usual. Low, so that even a small message's base64
 * skips JSON.parse and the schema's pattern (both walk it character by character in JS).
 */
const LONG = 1024;
/** Base64 decoded per step: small transient strings, a multiple of 4 characters. */
const STEP = 1024 * 1024;

export interface LongField {
  /** The base64 text as received (its bytes are its characters). */
  text: Buffer;
  /** What it decodes to. */
  bytes: Buffer;
}

/**
 * Decodes padded standard base64 held in `text`; null when it is not exactly that. Node's
 * decoder skips what is not base64, so each step is encoded back and compared: equal only for
 * the alphabet, padding at the very end, and no stray bits (a non-canonical string is left to
 * JSON.parse and the schema, which decide as they always did). All of it native, no JS loop.
 */
function decodeBase64(text: Buffer): Buffer | null {
  if (text.length % 4 !== 0) return null;
  const padding = text[text.length - 1] === 0x3d ? (text[text.length - 2] === 0x3d ? 2 : 1) : 0;
  const out = Buffer.allocUnsafe((text.length / 4) * 3 - padding);
  let written = 0;
  for (let at = 0; at < text.length; at += STEP) {
    const chars = text.subarray(at, Math.min(at + STEP, text.length)).toString('latin1');
    const decoded = Buffer.from(chars, 'base64');
    if (decoded.toString('base64') !== chars || written + decoded.length > out.length) return null;
    written += decoded.copy(out, written);
  }
  return written === out.length ? out : null;
}

/**
 * The parsed body, with each long base64 string replaced by a placeholder key of `fields`.
 * 400 when the body is not JSON (as readJson would).
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
      const text = body.subarray(open + 1, close);
      const bytes = decodeBase64(text);
      if (bytes) {
        // A placeholder made of base64 characters, so the schema's checks of the field pass.
        const key = `PoStErNlOnGfIeLd${String(fields.size).padStart(4, '0')}`;
        fields.set(key, { text, bytes });
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
    throw badRequest('request body is not valid JSON');
  }
}
