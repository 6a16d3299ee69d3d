// Opens what POST /send carries (docs/sending.md): the client sealed the RFC 5322 message with a
// fresh session key, sent the PKESK packet(s) sealing that key to the epoch key (`wrappedDek`)
// and the encrypted data packet (`ciphertext`), and named the literal data packet after the
// draft id. That name is the binding: a ciphertext made for another draft cannot be replayed
// under a new one.
import * as openpgp from 'openpgp';
import { UnknownEpochError, type EpochKeys } from '../crypto/epoch-keys.ts';
import { invalid, unprocessable } from '../errors.ts';

export interface SealedDraft {
  draftId: string;
  epoch: number;
  wrappedDek: Buffer;
  ciphertext: Buffer;
}

export class DraftOpener {
  constructor(private readonly keys: EpochKeys) {}

  /**
   * The RFC 5322 bytes; 400 for an unknown epoch, a ciphertext that does not open, or another
   * draft's; 422 for compressed data (a policy: the web app never compresses, and 30 KB of
   * bzip2 opens to 25 MB the send memory budget never counted). Uncompressed, the opened
   * message is never larger than its ciphertext.
   */
  async open(inboxId: string, sealed: SealedDraft): Promise<Buffer> {
    let key: openpgp.PrivateKey;
    try {
      key = await this.keys.privateKey(inboxId, sealed.epoch);
    } catch (err) {
      if (err instanceof UnknownEpochError) throw invalid(`epoch ${sealed.epoch} is not a key epoch of this inbox`);
      throw err;
    }
    let opened: { data: Uint8Array; filename: string };
    try {
      const message = await openpgp.readMessage({ binaryMessage: Buffer.concat([sealed.wrappedDek, sealed.ciphertext]) });
      // Nothing may come out of a compressed packet: it fails at its first decompressed byte
      // (openpgp.js has no switch to refuse the packet before it starts).
      const result = await openpgp.decrypt({ message, decryptionKeys: key, format: 'binary', config: { maxDecompressedMessageSize: 0 } });
      opened = { data: result.data, filename: result.filename };
    } catch (err) {
      if (err instanceof Error && /decompress/i.test(err.message)) {
        throw unprocessable('the draft holds compressed data, which is refused: seal the message without compression');
      }
      throw invalid(`the ciphertext does not open with the epoch ${sealed.epoch} key and this wrappedDek`);
    }
    if (opened.filename !== sealed.draftId) {
      throw invalid(`the ciphertext is not bound to ${sealed.draftId} (its literal data is named ${JSON.stringify(opened.filename)})`);
    }
    return Buffer.from(opened.data.buffer, opened.data.byteOffset, opened.data.byteLength);
  }
}
