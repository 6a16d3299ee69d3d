// RecentEvents (lib/webhooks/recent-events.ts): the dispatcher's bounded keep of events it read.
import { expect } from 'chai';
import { RecentEvents } from '../../lib/webhooks/recent-events.ts';
import type { StoredEvent } from '../../lib/events/types.ts';

const event = (position: number, projectId = 'prj_a', size = 10): StoredEvent => ({
  position,
  eventId: `evt_${position}`,
  projectId,
  inboxId: null,
  type: 'message.added',
  visibility: 'inbox',
  recordedAt: position,
  json: 'x'.repeat(size),
});

describe('webhooks: RecentEvents', () => {
  it('gives back a kept event only for its own project', () => {
    const r = new RecentEvents();
    r.add([event(1), event(2, 'prj_b')]);
    expect(r.get('prj_a', 1)?.eventId).to.equal('evt_1');
    expect(r.get('prj_a', 2)).to.equal(undefined);
    expect(r.get('prj_b', 2)?.eventId).to.equal('evt_2');
    expect(r.get('prj_a', 3)).to.equal(undefined);
  });

  it('lets the oldest go once the kept bodies pass their bound', () => {
    const r = new RecentEvents();
    // 3 MiB each: the 8 MiB bound holds two of them.
    const big = 3 * 1024 * 1024;
    r.add([event(1, 'prj_a', big), event(2, 'prj_a', big)]);
    r.add([event(3, 'prj_a', big)]);
    expect(r.get('prj_a', 1)).to.equal(undefined);
    expect(r.get('prj_a', 2)?.position).to.equal(2);
    expect(r.get('prj_a', 3)?.position).to.equal(3);
  });

  it('keeps at most so many events, however small', () => {
    const r = new RecentEvents();
    r.add(Array.from({ length: 9000 }, (_, i) => event(i + 1)));
    expect(r.get('prj_a', 1)).to.equal(undefined);
    expect(r.get('prj_a', 9000)?.position).to.equal(9000);
  });
});
