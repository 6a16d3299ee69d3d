// Sealing a message for POST /send (docs/sending.md): encrypted with a fresh session key to the
// inbox's current epoch key, its literal data packet named after the draft (that is the binding
// Postern checks), then split into the PKESK packet(s) (`wrappedDek`) and the encrypted data
// packet (`ciphertext`), as the contract's two fields want them (docs/api.md, "Sending").
import { createMessage, encrypt, enums, PacketList, readKey } from 'openpgp';
import type { ComposeData } from '../../schemas/wire.ts';
import { fromBase64, toBase64 } from '../bytes.ts';

/** A fresh draft id: `draft_` and 22 base64url characters (128 random bits; docs/api.md, "Identifiers"). */
export function newDraftId(): string {
  const b64 = toBase64(crypto.getRandomValues(new Uint8Array(16)));
  return `draft_${b64.replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '')}`;
}

export async function sealForSend(
  compose: ComposeData,
  raw: Uint8Array,
  draftId: string,
): Promise<{ wrappedDek: string; ciphertext: string }> {
  const key = await readKey({ binaryKey: fromBase64(compose.epochPublic) });
  const sealed = await encrypt({ message: await createMessage({ binary: raw, filename: draftId }), encryptionKeys: key, format: 'object' });
  const pkesk = new PacketList();
  const rest = new PacketList();
  for (const packet of sealed.packets) {
    const tag = (packet.constructor as unknown as { tag: number }).tag;
    (tag === enums.packet.publicKeyEncryptedSessionKey ? pkesk : rest).push(packet);
  }
  if (pkesk.length === 0 || rest.length === 0) throw new Error('sealing the message gave no key packet');
  return { wrappedDek: toBase64(pkesk.write()), ciphertext: toBase64(rest.write()) };
}
