// Zero-access sealing: a whole RFC 822 message, byte for byte, becomes an RFC 3156 PGP/MIME
// message encrypted to the inbox's current epoch key. The routing headers stay in clear on the
// outside so the metadata API (and a mail app's message list) can show them without a key.
// Pure: bytes and a key in, bytes out. The LMTP ingress and the re-sealing of mail-app appends
// both use it.
import { randomBytes } from 'node:crypto';
import * as openpgp from 'openpgp';

/** Headers copied in clear onto the sealed message (docs/ingress.md, "What is stored for a zero-access inbox"). */
export const CLEAR_HEADERS: readonly string[] = ['from', 'to', 'cc', 'subject', 'date', 'message-id', 'in-reply-to', 'references'];

/** Names the epoch a sealed message was sealed to (and says Postern sealed it). */
export const SEALED_HEADER = 'X-Postern-Sealed';

export interface SealKey {
  epoch: number;
  /** The epoch's OpenPGP public key (binary or armored). */
  publicKey: openpgp.PublicKey;
}

const CRLF = '\r\n';

/** Where the header block ends: the index of the blank line's first byte, or -1. */
function headerEnd(raw: Uint8Array): { end: number; bodyStart: number } | null {
  for (let i = 0; i < raw.length; i++) {
    if (raw[i] !== 0x0a) continue;
    // A line starting right after this LF that is empty ends the header block.
    if (raw[i + 1] === 0x0a) return { end: i + 1, bodyStart: i + 2 };
    if (raw[i + 1] === 0x0d && raw[i + 2] === 0x0a) return { end: i + 1, bodyStart: i + 3 };
  }
  return null;
}

/**
 * The header fields of `raw` named in CLEAR_HEADERS, each with its continuation lines, in
 * their original order, CRLF-terminated. A message without a header block (or with junk where
 * it should be) yields what can be read as fields from its start, possibly nothing: the
 * original is sealed whole whatever this finds.
 */
export function clearHeaders(raw: Uint8Array): string {
  const found = headerEnd(raw);
  // Headers are 7-bit by rule and 8-bit in practice: latin1 maps each byte to one char and back.
  const block = Buffer.from(raw.buffer, raw.byteOffset, found ? found.end : raw.length).toString('latin1');
  const lines = block.split(/\r?\n/);
  const out: string[] = [];
  let keeping = false;
  for (const line of lines) {
    if (line === '') break;
    if (line[0] === ' ' || line[0] === '\t') {
      if (keeping) out.push(line);
      continue;
    }
    const colon = line.indexOf(':');
    // Not a field: without a blank line this is where the headers end.
    if (colon <= 0 || !/^[\x21-\x39\x3b-\x7e]+$/.test(line.slice(0, colon).trimEnd())) {
      if (!found) break;
      keeping = false;
      continue;
    }
    keeping = CLEAR_HEADERS.includes(line.slice(0, colon).trimEnd().toLowerCase());
    if (keeping) out.push(line);
  }
  // A lone CR or a NUL inside a copied line would break the outer message's framing.
  return out.map((l) => l.replace(/[\r\0]/g, ' ') + CRLF).join('');
}

/**
 * Seals `raw` to `key`: RFC 3156 multipart/encrypted whose encrypted part opens (OpenPGP, armored)
 * to exactly `raw`. The result is CRLF throughout. `of`, the message GUID of the plaintext it
 * replaces (lib/mail/resealing.ts), goes in the marker header, so a retry finds this copy.
 */
export async function seal(raw: Uint8Array, key: SealKey, options: { of?: string } = {}): Promise<Buffer> {
  const message = await openpgp.createMessage({ binary: raw, format: 'binary' });
  const armored = await openpgp.encrypt({ message, encryptionKeys: key.publicKey, format: 'armored' });
  const boundary = `postern-${randomBytes(12).toString('hex')}`;
  const head =
    clearHeaders(raw) +
    `${SEALED_HEADER}: epoch=${key.epoch}; fingerprint=${key.publicKey.getFingerprint()}${options.of && /^[0-9a-f]+$/i.test(options.of) ? `; of=${options.of}` : ''}${CRLF}` +
    `MIME-Version: 1.0${CRLF}` +
    `Content-Type: multipart/encrypted; protocol="application/pgp-encrypted";${CRLF} boundary="${boundary}"${CRLF}` +
    CRLF +
    `This is an OpenPGP/MIME encrypted message (RFC 3156).${CRLF}` +
    `--${boundary}${CRLF}` +
    `Content-Type: application/pgp-encrypted${CRLF}` +
    `Content-Description: PGP/MIME version identification${CRLF}` +
    CRLF +
    `Version: 1${CRLF}` +
    CRLF +
    `--${boundary}${CRLF}` +
    `Content-Type: application/octet-stream; name="encrypted.asc"${CRLF}` +
    `Content-Description: OpenPGP encrypted message${CRLF}` +
    `Content-Disposition: inline; filename="encrypted.asc"${CRLF}` +
    CRLF;
  const tail = `${CRLF}--${boundary}--${CRLF}`;
  return Buffer.concat([
    Buffer.from(head, 'latin1'),
    Buffer.from(armored.replace(/\r?\n/g, CRLF).replace(/\r\n$/, ''), 'ascii'),
    Buffer.from(tail, 'ascii'),
  ]);
}

/**
 * True when `raw` is PGP/MIME already (RFC 3156 multipart/encrypted): sealed by Postern or by
 * its sender. Re-sealing leaves such a message alone: it holds no plaintext.
 */
export function isPgpMime(raw: Uint8Array): boolean {
  const found = headerEnd(raw);
  const block = Buffer.from(raw.buffer, raw.byteOffset, found ? found.end : Math.min(raw.length, 64 * 1024)).toString('latin1');
  const unfolded = block.replace(/\r?\n[ \t]+/g, ' ');
  return /^content-type:[ \t]*multipart\/encrypted\b[^\n]*application\/pgp-encrypted/im.test(unfolded);
}

/** The sealed message's epoch, from its marker header, or null when it carries none. */
export function sealedEpoch(raw: Uint8Array): number | null {
  const found = headerEnd(raw);
  const block = Buffer.from(raw.buffer, raw.byteOffset, found ? found.end : Math.min(raw.length, 64 * 1024)).toString('latin1');
  const m = new RegExp(`^${SEALED_HEADER}:[ \\t]*epoch=(\\d+)`, 'im').exec(block);
  return m ? Number(m[1]) : null;
}
