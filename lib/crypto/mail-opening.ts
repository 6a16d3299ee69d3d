// What the web app reads to open a message itself (docs/encryption.md): the detail's `keyEpoch` and
// `wrappedDek`, and `/raw`. Compatible inboxes: the session key is made the first time it is
// asked for and only its sealed form is stored; `/raw` is derived from Dovecot's bytes
// (envelope.ts). Zero-access inboxes: both come from the stored PGP/MIME message (RFC 3156):
// its PKESK packets and its encrypted-data packet.
import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import * as openpgp from 'openpgp';
import type { Inbox } from '../directory/types.ts';
import { notFound, unprocessable } from '../errors.ts';
import { guidFromId } from '../ids.ts';
import type { MessageBodies } from '../mail/bodies.ts';
import type { MailService } from '../mail/service.ts';
import type { MessageDetail, MessageSummary } from '../../schemas/wire.ts';
import type { IndexedDetail, Location } from '../mail/types.ts';
import type { MailIndexStore } from '../mail/ports.ts';
import { newSessionKey, sealedDataPacket, unwrapSessionKey, wrapSessionKey } from './envelope.ts';
import type { EpochKeys } from './epoch-keys.ts';
import type { MessageKeyRecord, MessageKeyStore } from './ports.ts';
import { openpgpBytes } from './armor.ts';

/** More than this before the encrypted-data packet is not a PKESK list (each is ~100 bytes). */
const MAX_PKESK_BYTES = 64 * 1024;

export interface MailOpeningOptions {
  mail: MailService;
  index: MailIndexStore;
  bodies: MessageBodies;
  keys: EpochKeys;
  messageKeys: MessageKeyStore;
  now?: () => number;
}

export class MailOpening {
  private readonly mail: MailService;
  private readonly index: MailIndexStore;
  private readonly bodies: MessageBodies;
  private readonly keys: EpochKeys;
  private readonly messageKeys: MessageKeyStore;
  private readonly now: () => number;

  constructor(o: MailOpeningOptions) {
    this.mail = o.mail;
    this.index = o.index;
    this.bodies = o.bodies;
    this.keys = o.keys;
    this.messageKeys = o.messageKeys;
    this.now = o.now ?? Date.now;
  }

  /** The message detail (docs/api.md, "Message detail") with its ETag, which also covers `wrappedDek` (it changes when that is first made). */
  async detail(inbox: Inbox, msgId: string): Promise<{ detail: MessageDetail; etag: string }> {
    const { detail, etag } = await this.mail.message(inbox, msgId);
    const key = await this.messageKey(inbox, msgId);
    const wrappedDek = Buffer.from(key.wrappedDek).toString('base64');
    const sealed: MessageDetail = { message: detail.message, keyEpoch: key.epoch, wrappedDek, ...rest(detail) };
    const tag = createHash('sha256').update(`${etag}\n${key.epoch}\n${wrappedDek}`).digest('base64url').slice(0, 27);
    return { detail: sealed, etag: `"${tag}"` };
  }

  /** The encrypted-data packet: `readMessage(wrappedDek ‖ raw)` opens with the epoch key. */
  async raw(inbox: Inbox, msgId: string): Promise<Readable> {
    await this.mail.message(inbox, msgId);
    const at = await this.location(inbox, msgId);
    const key = await this.messageKey(inbox, msgId);
    if (inbox.mode === 'zero-access') return this.zeroAccessRaw(inbox, at, key.wrappedDek);
    const sessionKey = await unwrapSessionKey(key.wrappedDek, await this.keys.privateKey(inbox.id, key.epoch));
    const plain = await this.bodies.open(inbox, at);
    if (!plain) throw notFound('message not found');
    const sealed = Readable.from(sealedDataPacket(plain, sessionKey), { objectMode: false });
    // A reader that goes away stops the IMAP download too.
    sealed.once('close', () => plain.destroy());
    return sealed;
  }

  /**
   * The stored RFC 5322 bytes of a compatible inbox's message (the caller checked the mode), and
   * its summary, from one refresh of the index.
   */
  async plaintext(inbox: Inbox, msgId: string): Promise<{ message: MessageSummary; body: Readable }> {
    const { detail } = await this.mail.message(inbox, msgId);
    const body = await this.bodies.open(inbox, await this.location(inbox, msgId));
    if (!body) throw notFound('message not found');
    return { message: detail.message, body };
  }

  private async location(inbox: Inbox, msgId: string): Promise<Location> {
    const guid = guidFromId('msg', msgId);
    const first = guid ? (await this.index.message(inbox.id, guid))?.locations[0] : undefined;
    if (!first) throw notFound('message not found');
    return first;
  }

  private async messageKey(inbox: Inbox, msgId: string): Promise<MessageKeyRecord> {
    const guid = guidFromId('msg', msgId);
    if (!guid) throw notFound('message not found');
    const stored = await this.messageKeys.getMessageKey(inbox.id, guid);
    if (stored) return stored;
    if (inbox.mode === 'zero-access') {
      const { wrappedDek, epoch } = await this.zeroAccessParts(inbox, await this.location(inbox, msgId));
      return this.messageKeys.putMessageKeyOnce({ inboxId: inbox.id, msgGuid: guid, epoch, wrappedDek, createdAt: this.now() });
    }
    const current = await this.keys.current(inbox.id);
    const wrappedDek = await wrapSessionKey(newSessionKey(), current.publicKey);
    // Two first reads at once: the first write stands and both answer with it.
    return this.messageKeys.putMessageKeyOnce({
      inboxId: inbox.id,
      msgGuid: guid,
      epoch: current.epoch,
      wrappedDek,
      createdAt: this.now(),
    });
  }

  /** The stored OpenPGP message after its PKESK packets (whose bytes the detail holds), streamed. */
  private async zeroAccessRaw(inbox: Inbox, at: Location, wrappedDek: Uint8Array): Promise<Readable> {
    const part = await this.bodies.open(inbox, at, '2');
    if (!part) throw unprocessable('the stored message is not sealed (not PGP/MIME): it cannot be read in a zero-access inbox');
    async function* body(): AsyncGenerator<Buffer> {
      const binary = openpgpBytes(part as AsyncIterable<Buffer>);
      // Skip the PKESK packets, checking they are the ones the detail gave out.
      let skip = wrappedDek.length;
      for await (const chunk of binary) {
        if (skip > 0) {
          const head = chunk.subarray(0, skip);
          if (!head.equals(Buffer.from(wrappedDek.subarray(wrappedDek.length - skip, wrappedDek.length - skip + head.length)))) {
            throw new Error('the stored message changed under its wrapped data key');
          }
          skip -= head.length;
          if (chunk.length > head.length) yield chunk.subarray(head.length);
        } else yield chunk;
      }
    }
    const out = Readable.from(body(), { objectMode: false });
    out.once('close', () => part.destroy());
    return out;
  }

  /** RFC 3156: part 2 is the OpenPGP message, PKESK packet(s) ‖ the encrypted-data packet. */
  private async zeroAccessParts(inbox: Inbox, at: Location): Promise<{ wrappedDek: Uint8Array; epoch: number }> {
    const part = await this.bodies.open(inbox, at, '2');
    // No second part: a plaintext message the ingress has not sealed (yet).
    if (!part) throw unprocessable('the stored message is not sealed (not PGP/MIME): it cannot be read in a zero-access inbox');
    // Only the leading PKESK packets are needed: read until the packet after them starts.
    let split: { wrappedDek: Uint8Array } | null = null;
    let held = Buffer.alloc(0);
    try {
      for await (const chunk of openpgpBytes(part as AsyncIterable<Buffer>)) {
        held = Buffer.concat([held, chunk]);
        split = splitPkesk(held);
        if (split || held.length > MAX_PKESK_BYTES) break;
      }
    } finally {
      part.destroy();
    }
    if (!split) throw unprocessable('the stored message is not sealed (not an OpenPGP message): it cannot be read in a zero-access inbox');
    const message = await openpgp.readMessage({ binaryMessage: split.wrappedDek });
    const sealedTo = new Set(message.getEncryptionKeyIDs().map((id) => id.toHex()));
    for (const epoch of await this.keys.epochs(inbox.id)) {
      const pub = await this.keys.publicKey(inbox.id, epoch);
      if (pub.publicKey.getKeyIDs().some((id) => sealedTo.has(id.toHex()))) return { wrappedDek: split.wrappedDek, epoch };
    }
    throw unprocessable('the stored message is not sealed to any epoch key of this inbox');
  }
}

function rest(detail: IndexedDetail): Omit<IndexedDetail, 'message'> {
  const { message: _message, ...others } = detail;
  return others;
}

/**
 * Splits a binary OpenPGP message after its leading PKESK packets (tag 1). PKESK packets never
 * use partial lengths (RFC 4880 4.2.2.4), so each one's length is in its header. Null when the
 * message does not start with at least one PKESK followed by more packets.
 */
export function splitPkesk(bytes: Uint8Array): { wrappedDek: Uint8Array; raw: Uint8Array } | null {
  let at = 0;
  while (at < bytes.length) {
    const first = bytes[at]!;
    if ((first & 0x80) === 0) return null;
    let tag: number;
    let headerLen: number;
    let bodyLen: number;
    if (first & 0x40) {
      tag = first & 0x3f;
      const o = bytes[at + 1];
      if (o === undefined) return null;
      if (o < 192) [headerLen, bodyLen] = [2, o];
      else if (o < 224) [headerLen, bodyLen] = [3, ((o - 192) << 8) + (bytes[at + 2] ?? 0) + 192];
      else if (o === 255) [headerLen, bodyLen] = [6, Buffer.from(bytes.subarray(at + 2, at + 6)).readUInt32BE(0)];
      else if (tag === 1) return null;
      else [headerLen, bodyLen] = [0, 0];
    } else {
      tag = (first >> 2) & 0x0f;
      const lt = first & 3;
      if (lt === 0) [headerLen, bodyLen] = [2, bytes[at + 1] ?? 0];
      else if (lt === 1) [headerLen, bodyLen] = [3, ((bytes[at + 1] ?? 0) << 8) | (bytes[at + 2] ?? 0)];
      else if (lt === 2) [headerLen, bodyLen] = [5, Buffer.from(bytes.subarray(at + 1, at + 5)).readUInt32BE(0)];
      else [headerLen, bodyLen] = [0, 0];
    }
    if (tag !== 1) return at > 0 ? { wrappedDek: bytes.subarray(0, at), raw: bytes.subarray(at) } : null;
    at += headerLen + bodyLen;
  }
  return null;
}
