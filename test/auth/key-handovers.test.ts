// A new device gets the member's key from a signed-in one (docs/app.md, "A new device"): the
// routes under /me/key-handovers, with the browsers' sealing (web/handover.ts) run here on Node's
// WebCrypto, so the test sees exactly what the server relays and stores.
import { expect } from 'chai';
import { openFrom, requestKeys, sealTo, shortCode } from '../../web/handover.ts';
import { call, expectError, json, newProject, startPostern, type TestProject, type TestServer } from '../helpers/harness.ts';

const ORIGIN = 'http://localhost:8787';
const HANDOVER = 'https://postern.dev/schemas/app.json#/$defs/KeyHandover';
const LIST = 'https://postern.dev/schemas/app.json#/$defs/KeyHandoverList';

interface Handover {
  id: string;
  status: 'pending' | 'approved';
  device: string | null;
  mine: boolean;
  requesterKey: string;
  approverKey?: string;
  sealed?: string;
}

describe('handing the key to a new device (/me/key-handovers)', () => {
  let s: TestServer;
  let p: TestProject;
  let logToken: string;

  before(async () => {
    s = await startPostern({ POSTERN_APP_ORIGIN: ORIGIN, POSTERN_EVENTS_SETTLE_MS: '0' });
    p = await newProject(s);
    logToken = await p.token(['events:read', 'project:read']);
  });
  after(() => s.close());

  const send = (method: string, path: string, session: string, body?: unknown, headers: Record<string, string> = {}) =>
    call(`${s.app}${path}`, {
      method,
      session,
      headers: { 'content-type': 'application/json', ...headers },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
  const get = async <T>(path: string, session: string): Promise<T> => {
    const res = await call(`${s.app}${path}`, { session });
    expect(res.status, await res.clone().text()).to.equal(200);
    return json<T>(res);
  };
  /** Two sessions of a new member: the signed-in device, and the new one. */
  const devices = async () => {
    const memberId = await p.member();
    return { memberId, signedIn: await p.session({ memberId }), fresh: await p.session({ memberId }) };
  };

  it('relays the key sealed between the two devices: the server holds only public keys and ciphertext', async () => {
    const { memberId, signedIn, fresh } = await devices();
    const firefox = 'Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0';
    const mine = await requestKeys();
    const created = await send('POST', '/me/key-handovers', fresh, { publicKey: mine.publicKey }, { 'user-agent': firefox });
    expect(created.status, await created.clone().text()).to.equal(201);
    const request = await json<Handover>(created);
    s.postern.validator.body(HANDOVER, request);
    expect(request).to.include({ status: 'pending', mine: true, requesterKey: mine.publicKey, device: 'Firefox on Linux' });

    // The signed-in device lists it (the new device does not see its own as one to approve).
    const listed = await get<{ handovers: Handover[] }>('/me/key-handovers', signedIn);
    s.postern.validator.body(LIST, listed);
    expect(listed.handovers.map((h) => [h.id, h.mine])).to.deep.equal([[request.id, false]]);
    expect((await get<{ handovers: Handover[] }>('/me/key-handovers', fresh)).handovers).to.deep.equal([]);
    // Both screens show the same code: each makes it from the key the request carries.
    expect(await shortCode(listed.handovers[0]!.requesterKey))
      .to.equal(await shortCode(mine.publicKey))
      .and.match(/^\d{3} \d{3}$/);

    // A device cannot approve its own request.
    const secret = new TextEncoder().encode('-----BEGIN PGP PRIVATE KEY BLOCK----- (the member key)');
    const approval = await sealTo(listed.handovers[0]!.requesterKey, secret);
    await expectError(await send('POST', `/me/key-handovers/${request.id}/approve`, fresh, approval), 409, /own request/);
    const approved = await send('POST', `/me/key-handovers/${request.id}/approve`, signedIn, approval);
    expect(approved.status, await approved.clone().text()).to.equal(200);
    s.postern.validator.body(HANDOVER, await json(approved));
    await expectError(await send('POST', `/me/key-handovers/${request.id}/approve`, signedIn, approval), 409, /already approved/);
    expect((await get<{ handovers: Handover[] }>('/me/key-handovers', signedIn)).handovers).to.deep.equal([]);

    // The new device polls, opens the key, and ends the request.
    const polled = await get<Handover>(`/me/key-handovers/${request.id}`, fresh);
    s.postern.validator.body(HANDOVER, polled);
    expect(polled).to.include({ status: 'approved', approverKey: approval.publicKey, sealed: approval.sealed });
    expect(new TextDecoder().decode(await openFrom(mine, polled.approverKey!, polled.sealed!))).to.equal(new TextDecoder().decode(secret));
    // What the server stores is not the key.
    const stored = await s.postern.store.keyHandovers.get(memberId, request.id, Date.now());
    expect(JSON.stringify(stored)).to.not.include('PGP');
    // A sealed key changed on the way, or another approver key, does not open.
    const flipped = `${polled.sealed!.slice(0, -2)}${polled.sealed!.endsWith('AA') ? 'BB' : 'AA'}`;
    let refused = 0;
    await openFrom(mine, polled.approverKey!, flipped).catch(() => refused++);
    await openFrom(mine, (await requestKeys()).publicKey, polled.sealed!).catch(() => refused++);
    expect(refused).to.equal(2);

    expect((await send('DELETE', `/me/key-handovers/${request.id}`, fresh)).status).to.equal(204);
    await expectError(await call(`${s.app}/me/key-handovers/${request.id}`, { session: fresh }), 404, /expired/);
    await expectError(await send('DELETE', `/me/key-handovers/${request.id}`, fresh), 404);

    // The project log says a device gained the key.
    const res = await call(`${s.base}/events?types=access.device.approved&limit=500`, { token: logToken });
    expect(res.status, await res.clone().text()).to.equal(200);
    const { events } = await json<{ events: Array<{ actor: string; data: Record<string, unknown> }> }>(res);
    expect(events.filter((e) => e.data.memberId === memberId).map((e) => e.data)).to.deep.equal([
      { memberId, handoverId: request.id, device: 'Firefox on Linux' },
    ]);
  });

  it("keeps each member's requests to that member, and a signed-in device may refuse one", async () => {
    const a = await devices();
    const b = await devices();
    const request = await json<Handover>(await send('POST', '/me/key-handovers', a.fresh, { publicKey: (await requestKeys()).publicKey }));
    expect((await get<{ handovers: Handover[] }>('/me/key-handovers', b.signedIn)).handovers).to.deep.equal([]);
    await expectError(await call(`${s.app}/me/key-handovers/${request.id}`, { session: b.signedIn }), 404);
    const approval = await sealTo(request.requesterKey, new Uint8Array([1, 2, 3]));
    await expectError(await send('POST', `/me/key-handovers/${request.id}/approve`, b.signedIn, approval), 404);
    await expectError(await send('DELETE', `/me/key-handovers/${request.id}`, b.signedIn), 404);
    // Refused on the signed-in device: gone for the new one too.
    expect((await send('DELETE', `/me/key-handovers/${request.id}`, a.signedIn)).status).to.equal(204);
    await expectError(await call(`${s.app}/me/key-handovers/${request.id}`, { session: a.fresh }), 404);
  });

  it('refuses malformed keys and ciphertext with a 400, a sixth request with a 429, and API tokens', async () => {
    const { signedIn, fresh } = await devices();
    const { publicKey } = await requestKeys();
    await expectError(await send('POST', '/me/key-handovers', fresh, {}), 400, /publicKey/);
    await expectError(await send('POST', '/me/key-handovers', fresh, { publicKey: 'not a key' }), 400, /publicKey/);
    await expectError(await send('POST', '/me/key-handovers', fresh, { publicKey: `A${publicKey.slice(1)}` }), 400, /publicKey/);
    await expectError(await send('POST', '/me/key-handovers', fresh, { publicKey, extra: 1 }), 400);
    await expectError(await send('POST', '/me/key-handovers', fresh, { publicKey: 'B'.repeat(5000) }), 413);
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await json<Handover>(await send('POST', '/me/key-handovers', fresh, { publicKey }))).id);
    await expectError(await send('POST', '/me/key-handovers', fresh, { publicKey }), 429, /waiting/);
    const approve = (body: unknown) => send('POST', `/me/key-handovers/${ids[0]}/approve`, signedIn, body);
    await expectError(await approve({ publicKey }), 400, /sealed/);
    await expectError(await approve({ publicKey, sealed: 'not base64url!' }), 400, /sealed/);
    await expectError(await approve({ publicKey, sealed: 'A'.repeat(65537) }), 400, /sealed/);
    await expectError(await approve({ publicKey, sealed: 'A'.repeat(100_000) }), 413);
    await expectError(await send('POST', '/me/key-handovers/kho_nope/approve', signedIn, { publicKey, sealed: 'AAAA' }), 404);
    await expectError(await call(`${s.app}/me/key-handovers/not-an-id`, { session: signedIn }), 404);
    await expectError(await call(`${s.app}/me/key-handovers`), 401);
    const token = await p.token(['messages:read']);
    await expectError(await call(`${s.app}/me/key-handovers`, { token }), 401);
  });
});
