// A new device gets the member's key from a device already signed in (docs/app.md, "A new device"):
// the new device, signed in with a passkey but holding no key, posts an ephemeral public key; a
// signed-in device that holds the key lists it, checks with the member that both screens show the
// same short code (made in the browsers from that public key), and posts the key sealed to it
// under ECDH; the new device reads the sealed key and opens it. The server keeps public keys and
// ciphertext for a few minutes and can open none of it (docs/encryption.md, "Handing the key to a
// new device").
import type * as Wire from '../../schemas/wire.ts';
import { conflict, notFound, rateLimited } from '../errors.ts';
import type { EventLog } from '../events/log.ts';
import { isId, newId } from '../ids.ts';
import type { KeyHandover, KeyHandoverStore } from './ports.ts';

/** How long a request waits for approval and then for the new device to read it. */
export const HANDOVER_TTL_MS = 5 * 60_000;
/** Requests a member may have at once: a device asks once, a retry replaces nothing. */
export const MAX_PENDING_HANDOVERS = 5;
/** The sealed key at most: the armored key (a few KiB) with its AES-GCM tag, in base64url. */
export const MAX_SEALED_CHARS = 64 * 1024;

/** Who asks: the caller's member, project and session. */
export interface HandoverCaller {
  memberId: string;
  projectId: string;
  sessionId: string;
}

export class KeyHandovers {
  constructor(
    private readonly store: KeyHandoverStore,
    private readonly events: EventLog,
    private readonly now: () => number = Date.now,
  ) {}

  /** The new device asks. */
  async create(caller: HandoverCaller, requesterKey: string, device: string | null): Promise<Wire.KeyHandover> {
    const at = this.now();
    const h: KeyHandover = {
      id: newId('kho', at),
      memberId: caller.memberId,
      requesterSession: caller.sessionId,
      device,
      requesterKey,
      approverKey: null,
      sealed: null,
      createdAt: at,
      expiresAt: at + HANDOVER_TTL_MS,
    };
    if (!(await this.store.create(h, at, MAX_PENDING_HANDOVERS))) {
      throw rateLimited('too many devices are waiting for approval; try again in a few minutes', HANDOVER_TTL_MS / 1000);
    }
    return wire(h, caller);
  }

  /** What a signed-in device may approve: the member's pending requests, but not its own. */
  async listPending(caller: HandoverCaller): Promise<Wire.KeyHandoverList> {
    const pending = await this.store.listPending(caller.memberId, this.now());
    return { handovers: pending.filter((h) => h.requesterSession !== caller.sessionId).map((h) => wire(h, caller)) };
  }

  /** One request, with the sealed key once approved (what the new device polls for). */
  async get(caller: HandoverCaller, id: string): Promise<Wire.KeyHandover> {
    return wire(await this.found(caller, id), caller);
  }

  /** A signed-in device hands the key over, sealed to the request's public key. */
  async approve(caller: HandoverCaller, id: string, approverKey: string, sealed: string): Promise<Wire.KeyHandover> {
    const h = await this.found(caller, id);
    if (h.requesterSession === caller.sessionId)
      throw conflict('a device cannot approve its own request: approve it on another signed-in device');
    if (h.sealed !== null) throw conflict('this request was already approved');
    if (!(await this.store.approve(caller.memberId, id, approverKey, sealed, this.now()))) {
      throw conflict('this request was approved or expired meanwhile');
    }
    // Every device that gains the key is in the project log, as every passkey added is.
    await this.events.record({
      type: 'access.device.approved',
      projectId: caller.projectId,
      actor: caller.memberId,
      subject: caller.memberId,
      data: { memberId: caller.memberId, handoverId: id, ...(h.device ? { device: h.device } : {}) },
    });
    return wire({ ...h, approverKey, sealed }, caller);
  }

  /** Either device ends it: the new device once it has the key (or gives up), a signed-in one to refuse. */
  async remove(caller: HandoverCaller, id: string): Promise<void> {
    if (!isId('kho', id) || !(await this.store.remove(caller.memberId, id))) throw notFound('no such device request (expired?)');
  }

  private async found(caller: HandoverCaller, id: string): Promise<KeyHandover> {
    const h = isId('kho', id) ? await this.store.get(caller.memberId, id, this.now()) : null;
    if (!h) throw notFound('no such device request (expired?)');
    return h;
  }
}

function wire(h: KeyHandover, caller: HandoverCaller): Wire.KeyHandover {
  return {
    id: h.id,
    status: h.sealed === null ? 'pending' : 'approved',
    device: h.device,
    mine: h.requesterSession === caller.sessionId,
    requesterKey: h.requesterKey,
    ...(h.approverKey !== null && h.sealed !== null ? { approverKey: h.approverKey, sealed: h.sealed } : {}),
    createdAt: new Date(h.createdAt).toISOString(),
    expiresAt: new Date(h.expiresAt).toISOString(),
  };
}
