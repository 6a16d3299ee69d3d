// How a client (the web app) opens a message itself, with openpgp.js, from three reads:
//   1. GET /inboxes/{inbox}/keys            → each epoch's private key, sealed to the member's key
//   2. GET /inboxes/{inbox}/messages/{msg}  → keyEpoch and wrappedDek (PKESK packets)
//   3. GET /inboxes/{inbox}/messages/{msg}/raw → the encrypted-data packet
// readMessage(wrappedDek ‖ raw), decrypted with the epoch key, is the RFC 5322 message.
// test/crypto/encryption.test.ts runs this file against a real server.
import * as openpgp from 'openpgp';

export interface Session {
  /** {app_url} for the web app (…/api/v1), or {base_url} (…/v1) with an API token. */
  baseUrl: string;
  headers: Record<string, string>;
  /** The member's own private key (what PUT /me/key holds the public half of). */
  memberKey: openpgp.PrivateKey;
}

async function get(s: Session, path: string): Promise<Response> {
  const res = await fetch(`${s.baseUrl}${path}`, { headers: s.headers });
  if (!res.ok) throw new Error(`GET ${path}: ${res.status} ${await res.text()}`);
  return res;
}

const fromBase64 = (text: string) => Uint8Array.from(Buffer.from(text, 'base64'));

/** Every epoch key of the inbox, opened with the member's key. Keep them for the session. */
export async function epochKeys(s: Session, inboxId: string): Promise<Map<number, openpgp.PrivateKey>> {
  const { epochs } = (await (await get(s, `/inboxes/${inboxId}/keys`)).json()) as { epochs: Array<{ epoch: number; wrapped: string }> };
  const out = new Map<number, openpgp.PrivateKey>();
  for (const { epoch, wrapped } of epochs) {
    const message = await openpgp.readMessage({ binaryMessage: fromBase64(wrapped) });
    const { data } = await openpgp.decrypt({ message, decryptionKeys: s.memberKey, format: 'binary' });
    out.set(epoch, await openpgp.readPrivateKey({ binaryKey: data as Uint8Array }));
  }
  return out;
}

/** The message's RFC 5322 bytes. `/raw` is immutable: a browser may cache it for good. */
export async function openMessage(s: Session, inboxId: string, msgId: string, keys?: Map<number, openpgp.PrivateKey>): Promise<Uint8Array> {
  const epochs = keys ?? (await epochKeys(s, inboxId));
  const detail = (await (await get(s, `/inboxes/${inboxId}/messages/${msgId}`)).json()) as { keyEpoch: number; wrappedDek: string };
  const key = epochs.get(detail.keyEpoch);
  if (!key) throw new Error(`no key for epoch ${detail.keyEpoch}: fetch /keys again (the inbox rotated)`);
  const raw = new Uint8Array(await (await get(s, `/inboxes/${inboxId}/messages/${msgId}/raw`)).arrayBuffer());
  const wrappedDek = fromBase64(detail.wrappedDek);
  const joined = new Uint8Array(wrappedDek.length + raw.length);
  joined.set(wrappedDek);
  joined.set(raw, wrappedDek.length);
  const message = await openpgp.readMessage({ binaryMessage: joined });
  const { data } = await openpgp.decrypt({ message, decryptionKeys: key, format: 'binary' });
  return data as Uint8Array;
}
