// The state-after changes (docs/organize.md, "Events"): message.labels, every label a message is
// in after a pass that added it somewhere or removed it from somewhere (JMAP's Email changes carry
// the state, not the steps), and message.keywords, a message's keywords in a label after they
// changed. Derived from the same diffs as message.added / removed / flags, so a mail app's change
// and the API's are the same events.
import { guidFromId, idFromGuid } from '../ids.ts';
import { fromImapFlags } from './flags.ts';
import { compareLabels } from './labels.ts';
import type { ChangePoint, LiveChange, MessageChange } from './types.ts';
import type { MailIndexStore } from './ports.ts';

/** message.keywords for a flag change whose keywords differ (none when only Flags changed). */
export function keywordsChange(flagChange: MessageChange, before: readonly string[], after: readonly string[]): LiveChange | null {
  const was = fromImapFlags(before).keywords;
  const now = fromImapFlags(after).keywords;
  const key = (k: readonly string[]) =>
    k
      .map((x) => x.toLowerCase())
      .sort()
      .join(' ');
  if (key(was) === key(now)) return null;
  return { type: 'message.keywords', msgId: flagChange.msgId, labelId: flagChange.labelId, keywords: now, at: flagChange.at };
}

/** The most messages one pass derives message.labels for. */
export const MAX_DERIVED = 5000;

/**
 * Collects the messages a pass added or removed (wrap its publish), then makes one message.labels
 * each from the index once the pass is done: for a message that was in some label before the pass
 * and is in some label after it. A new arrival (message.added says it) and a message gone from
 * every label (message.removed says it) get none, so plain delivery and expunge cost no more
 * events than before. Keyed on the last addition or removal seen of the message (`at`): two
 * processes that applied the same change record it once.
 */
export class LabelStateCollector {
  private readonly touched = new Map<string, { at: ChangePoint; added: Set<string>; removed: Set<string> }>();

  see(changes: readonly LiveChange[]): void {
    for (const c of changes) {
      if (c.type !== 'message.added' && c.type !== 'message.removed') continue;
      let t = this.touched.get(c.msgId);
      if (!t) this.touched.set(c.msgId, (t = { at: c.at, added: new Set(), removed: new Set() }));
      t.at = { ...c.at, after: c.type };
      (c.type === 'message.added' ? t.added : t.removed).add(c.at.labelGuid);
    }
  }

  async changes(store: MailIndexStore, inboxId: string): Promise<LiveChange[]> {
    // A pass this big is a mass import or a reconcile of a label, not someone filing mail: one
    // index read per message would make the pass itself much longer, and message.added and
    // message.removed already say every change (docs/organize.md, "Events").
    if (this.touched.size === 0 || this.touched.size > MAX_DERIVED) {
      this.touched.clear();
      return [];
    }
    const labels = (await store.labels(inboxId)).sort(compareLabels);
    const order = new Map(labels.map((l, i) => [l.guid, i]));
    const out: LiveChange[] = [];
    for (const [msgId, t] of this.touched) {
      const guid = guidFromId('msg', msgId);
      const found = guid ? await store.message(inboxId, guid) : null;
      const after = [...new Set((found?.locations ?? []).map((l) => l.labelGuid))];
      const before = new Set([...after.filter((g) => !t.added.has(g)), ...t.removed]);
      if (after.length === 0 || before.size === 0) continue;
      after.sort((a, b) => (order.get(a) ?? Infinity) - (order.get(b) ?? Infinity));
      out.push({ type: 'message.labels', msgId, labelIds: after.map((g) => idFromGuid('lbl', g)), at: t.at });
    }
    this.touched.clear();
    return out;
  }
}
