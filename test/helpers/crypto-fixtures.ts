// Shared by the encryption tests: a member's own key pair, setting it, and an inbox's messages.
import * as openpgp from 'openpgp';
import { call, json, type TestServer } from './harness.ts';

export async function memberKeyPair(): Promise<{ privateKey: openpgp.PrivateKey; armoredPublic: string }> {
  const { privateKey, publicKey } = await openpgp.generateKey({
    type: 'ecc',
    curve: 'ed25519Legacy',
    userIDs: [{ email: 'member@example.org' }],
    format: 'object',
  });
  return { privateKey, armoredPublic: publicKey.armor() };
}

export async function putKey(s: TestServer, session: string, publicKey: string): Promise<Response> {
  return call(`${s.app}/me/key`, {
    method: 'PUT',
    session,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ publicKey }),
  });
}

/** The ids in the inbox's INBOX label, newest first. */
export async function inboxMessages(
  s: TestServer,
  token: string,
  inboxId: string,
): Promise<Array<{ id: string; uid: number; subject?: string }>> {
  const { labels } = await json<{ labels: Array<{ id: string; name: string }> }>(
    await call(`${s.base}/inboxes/${inboxId}/labels`, { token }),
  );
  const label = labels.find((l) => l.name === 'INBOX')!;
  return (
    await json<{ messages: Array<{ id: string; uid: number; subject?: string }> }>(
      await call(`${s.base}/inboxes/${inboxId}/labels/${label.id}/messages`, { token }),
    )
  ).messages;
}
