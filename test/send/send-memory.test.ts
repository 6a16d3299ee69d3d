// The send bodies' memory budget (lib/http/body-gate.ts): what a send counts against it
// (lib/http/routes/send.ts, sendMemoryBytes), large sends held to it a few at a time, small ones
// going beside them, and a large one never starved by small ones.
import { expect } from 'chai';
import { BodyGate } from '../../lib/http/body-gate.ts';
import { SEND_BODY_LIMIT, SEND_MEMORY_BUDGET, sendMemoryBytes } from '../../lib/http/routes/send.ts';
import { MAX_MESSAGE_BYTES } from '../../lib/send/service.ts';

const MB = 1024 * 1024;
/** The JSON body of a 25 MB message: its base64 and a few small fields. */
const BIG_BODY = Math.ceil(MAX_MESSAGE_BYTES / 3) * 4 + 200;
/** A 20 KB message's body. */
const SMALL_BODY = Math.ceil((20 * 1024) / 3) * 4 + 200;

/** Enters `bytes`, noting when it got in. */
function enter(gate: BodyGate, bytes: number, log: string[], name: string): Promise<() => void> {
  return gate.enter(bytes).then((release) => {
    log.push(name);
    return release;
  });
}

/** Lets every promise that can settle now settle. */
const settled = () => new Promise((r) => setImmediate(r));

describe('sending: the memory budget', () => {
  it('counts the body and every whole copy made from it', () => {
    const message = Math.ceil(BIG_BODY / 4) * 3;
    // /messages: the base64 is decoded in place, the relayed message and the Sent copy are pieces of it.
    expect(sendMemoryBytes(BIG_BODY, { opened: false, sealed: false })).to.equal(BIG_BODY);
    // /send: the message opened from the ciphertext is a copy; sealing a zero-access copy makes two.
    expect(sendMemoryBytes(BIG_BODY, { opened: true, sealed: false })).to.equal(BIG_BODY + message);
    expect(sendMemoryBytes(BIG_BODY, { opened: true, sealed: true })).to.equal(BIG_BODY + 3 * message);
    // One 25 MB message and its body fit the budget with room for small ones beside it; two do not.
    expect(BIG_BODY).to.be.below(SEND_MEMORY_BUDGET - 16 * sendMemoryBytes(SMALL_BODY, { opened: true, sealed: true }));
    expect(2 * BIG_BODY).to.be.above(SEND_MEMORY_BUDGET);
    expect(BIG_BODY).to.be.at.most(SEND_BODY_LIMIT);
  });

  it('holds 8 large sends to the budget, one at a time, while small ones go beside them at once', async () => {
    const gate = new BodyGate(SEND_MEMORY_BUDGET);
    const big = sendMemoryBytes(BIG_BODY, { opened: false, sealed: false });
    const small = sendMemoryBytes(SMALL_BODY, { opened: false, sealed: false });
    const log: string[] = [];
    const bigs = Array.from({ length: 8 }, (_, i) => enter(gate, big, log, `big${i}`));
    await settled();
    expect(log).to.deep.equal(['big0']);
    // 16 small sends arrive while 7 large ones wait: none of them waits.
    const smalls = Array.from({ length: 16 }, (_, i) => enter(gate, small, log, `small${i}`));
    await settled();
    expect(log).to.have.length(17);
    for (const release of await Promise.all(smalls)) release();
    // The large ones follow each other, first come first served, never two at once.
    const admitted = () => log.filter((n) => n.startsWith('big'));
    for (let i = 0; i < 8; i++) {
      expect(admitted()).to.deep.equal(Array.from({ length: i + 1 }, (_, j) => `big${j}`));
      (await bigs[i]!)();
      await settled();
    }
  });

  it('lets a send larger than the budget go alone, and small ones do not starve it', async () => {
    const gate = new BodyGate(SEND_MEMORY_BUDGET);
    const alone = sendMemoryBytes(BIG_BODY, { opened: true, sealed: true });
    expect(alone).to.be.above(SEND_MEMORY_BUDGET);
    const small = sendMemoryBytes(SMALL_BODY, { opened: false, sealed: false });
    const log: string[] = [];
    const first = await enter(gate, small, log, 'small0');
    const huge = enter(gate, alone, log, 'huge');
    await settled();
    // Only small ones are in: a new small one waits its turn behind the large one.
    const later = enter(gate, small, log, 'small1');
    await settled();
    expect(log).to.deep.equal(['small0']);
    first();
    await settled();
    expect(log).to.deep.equal(['small0', 'huge']);
    (await huge)();
    (await later)();
    expect(log).to.deep.equal(['small0', 'huge', 'small1']);
    // Alone means alone: nothing large enters beside it.
    const held = await enter(gate, alone, log, 'huge2');
    const next = enter(gate, 10 * MB, log, 'large');
    await settled();
    expect(log.at(-1)).to.equal('huge2');
    held();
    await next;
  });
});
