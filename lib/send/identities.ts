// Identities (docs/sending.md, "Identities"): per address of an inbox, the display name and the
// signature that JSON compose (lib/send/compose.ts) puts on a message from that address. Set by
// the inbox's owners; an address nobody set has none (its name and signature are null).
import type { Inbox } from '../directory/types.ts';
import { forbidden, notFound } from '../errors.ts';
import type { Identity, IdentityInput, IdentityStore } from './ports.ts';

export type { Identity, IdentityInput, IdentityStore };

export class Identities {
  constructor(
    private readonly store: IdentityStore,
    private readonly now: () => number = Date.now,
  ) {}

  /** Every address of the inbox, in its order, with what was set for it. */
  async list(inbox: Inbox): Promise<Identity[]> {
    const set = new Map((await this.store.list(inbox.id)).map((i) => [i.address, i]));
    return inbox.addresses.map((a) => {
      const address = a.toLowerCase();
      return set.get(address) ?? { address, displayName: null, signatureText: null, signatureHtml: null, updatedAt: null };
    });
  }

  /** The identity of one address (as list() gives it), or null when it is not the inbox's. */
  async of(inbox: Inbox, address: string): Promise<Identity | null> {
    const wanted = address.toLowerCase();
    return (await this.list(inbox)).find((i) => i.address === wanted) ?? null;
  }

  /** Owners only (403 for another role); 404 for an address that is not the inbox's. */
  async set(inbox: Inbox, role: string, address: string, input: IdentityInput): Promise<Identity> {
    if (role !== 'owner') throw forbidden(`only the inbox's owners set its identities (your role: ${role})`);
    const wanted = address.toLowerCase();
    if (!inbox.addresses.some((a) => a.toLowerCase() === wanted)) throw notFound(`${address} is not one of this inbox's addresses`);
    const identity = { address: wanted, ...input, updatedAt: this.now() };
    await this.store.put(inbox.id, identity);
    return identity;
  }
}
