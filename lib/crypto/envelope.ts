// The encryption envelope of a compatible-mode message (docs/encryption.md).
// `wrappedDek` is the message's session key sealed to an epoch key (PKESK packets). `/raw` is a
// SEIPD packet (tag 18, version 1: AES-256 CFB with a zero IV and an MDC) built from Dovecot's
// bytes and the session key alone: fixed literal-packet fields, the CFB prefix derived from the
// session key, and fixed-size partial-length chunks, so every build is byte-identical without
// storing a second copy. `readMessage(wrappedDek ‖ raw)` opens with the epoch's private key.
import { createCipheriv, createHash, createHmac, randomBytes } from 'node:crypto';
import * as openpgp from 'openpgp';

/** AES-256: the only cipher Postern seals with. */
export const SESSION_KEY_BYTES = 32;
const BLOCK = 16;
/** Partial body chunks are 2^16 bytes (RFC 4880 4.2.2.4): fixed, so the framing is deterministic. */
const CHUNK_POWER = 16;
const CHUNK = 1 << CHUNK_POWER;
const PARTIAL = Buffer.from([0xe0 | CHUNK_POWER]);

export function newSessionKey(): Uint8Array {
  return randomBytes(SESSION_KEY_BYTES);
}

/** The PKESK packet(s) sealing `sessionKey` to the epoch key (the detail's `wrappedDek`). */
export async function wrapSessionKey(sessionKey: Uint8Array, epochKey: openpgp.PublicKey): Promise<Uint8Array> {
  return openpgp.encryptSessionKey({ data: sessionKey, algorithm: 'aes256', encryptionKeys: epochKey, format: 'binary' });
}

/** Opens `wrappedDek` with the epoch's private key; throws when it does not open. */
export async function unwrapSessionKey(wrappedDek: Uint8Array, epochKey: openpgp.PrivateKey): Promise<Uint8Array> {
  const message = await openpgp.readMessage({ binaryMessage: wrappedDek });
  const [found] = await openpgp.decryptSessionKeys({ message, decryptionKeys: epochKey });
  if (!found || found.algorithm !== 'aes256' || found.data.length !== SESSION_KEY_BYTES)
    throw new Error('the wrapped data key does not hold an AES-256 session key');
  return found.data;
}

/** RFC 4880 4.2.2: a new-format length for a final (or only) chunk. */
function lengthOctets(n: number): Buffer {
  if (n < 192) return Buffer.from([n]);
  if (n < 8384) return Buffer.from([((n - 192) >> 8) + 192, (n - 192) & 0xff]);
  const b = Buffer.alloc(5);
  b[0] = 0xff;
  b.writeUInt32BE(n, 1);
  return b;
}

/**
 * Frames a byte stream as one new-format packet with partial body lengths: 2^16-byte chunks
 * while more follows, then a definite length for the rest. Holds at most one chunk.
 */
async function* packet(tag: number, body: AsyncIterable<Uint8Array>): AsyncGenerator<Buffer> {
  yield Buffer.from([0xc0 | tag]);
  // The pieces of the chunk being filled go out as they are, after its length octet: no copy.
  let parts: Buffer[] = [];
  let held = 0;
  for await (const piece of body) {
    let buf = Buffer.from(piece.buffer, piece.byteOffset, piece.byteLength);
    while (held + buf.length > CHUNK) {
      // A partial chunk goes out only when at least one more byte follows it.
      const take = CHUNK - held;
      parts.push(buf.subarray(0, take));
      buf = buf.subarray(take);
      yield PARTIAL;
      yield* parts;
      parts = [];
      held = 0;
    }
    if (buf.length > 0) {
      parts.push(buf);
      held += buf.length;
    }
  }
  yield lengthOctets(held);
  yield* parts;
}

/** Binary literal data: format 'b', no file name, date 0 (fixed, so the bytes never change). */
async function* literalBody(source: AsyncIterable<Uint8Array>): AsyncGenerator<Uint8Array> {
  yield Buffer.from([0x62, 0, 0, 0, 0, 0]);
  yield* source;
}

/** The CFB prefix: 16 bytes from the session key, so it is the same on every build. */
export function cfbPrefix(sessionKey: Uint8Array): Buffer {
  return createHmac('sha256', sessionKey).update('postern seipd v1 prefix').digest().subarray(0, BLOCK);
}

/**
 * The `/raw` bytes: a SEIPD v1 packet holding `plaintext` (the RFC 5322 bytes) as a literal
 * data packet, streamed with memory independent of the message size.
 */
export async function* sealedDataPacket(plaintext: AsyncIterable<Uint8Array>, sessionKey: Uint8Array): AsyncGenerator<Buffer> {
  if (sessionKey.length !== SESSION_KEY_BYTES) throw new Error('an AES-256 session key is 32 bytes');
  const cipher = createCipheriv('aes-256-cfb', sessionKey, Buffer.alloc(BLOCK));
  async function* encrypted(): AsyncGenerator<Uint8Array> {
    yield Buffer.from([1]); // SEIPD version 1
    const mdc = createHash('sha1');
    const prefix = cfbPrefix(sessionKey);
    const head = Buffer.concat([prefix, prefix.subarray(BLOCK - 2)]);
    mdc.update(head);
    yield cipher.update(head);
    for await (const chunk of packet(11, literalBody(plaintext))) {
      mdc.update(chunk);
      yield cipher.update(chunk);
    }
    // The MDC packet (tag 19, length 20) covers its own two header octets.
    const mdcHeader = Buffer.from([0xd3, 0x14]);
    mdc.update(mdcHeader);
    yield cipher.update(Buffer.concat([mdcHeader, mdc.digest()]));
    const rest = cipher.final();
    if (rest.length > 0) yield rest;
  }
  yield* packet(18, encrypted());
}
