// One initial index of an inbox in a process of its own, so its peak RSS is the index's:
//   node --import tsx bench/mail-index.ts USER     (configured by the POSTERN_* variables)
// Prints { ms, messages, maxRssMb, baseRssMb, againMs } as JSON.
import { pino } from 'pino';
import { openStore } from '../adapters/store/open.ts';
import { ImapMailSource } from '../adapters/imap/source.ts';
import { loadConfig } from '../lib/config.ts';

const user = process.argv[2];
if (!user) throw new Error('usage: mail-index.ts USER');
const config = loadConfig();
const baseRssMb = process.memoryUsage().rss / 2 ** 20;

/** A first index of the user's mailboxes, as inbox `inboxId`, into the configured store (either engine). */
async function once(inboxId: string): Promise<{ ms: number; messages: number }> {
  const opened = await openStore(config);
  const store = opened.mailIndex;
  const source = new ImapMailSource({ imap: config.imap, store, log: pino({ level: 'warn' }) });
  const inbox = { id: inboxId, imapUser: user!, addresses: [user!] };
  const t = performance.now();
  // One pass, as the first read of an inbox makes (an unseeded index is never trusted).
  await source.sync(inbox, () => undefined);
  const ms = performance.now() - t;
  let messages = 0;
  for (const c of (await store.counts(inbox.id)).values()) messages += c.total;
  await source.close();
  await opened.close();
  return { ms, messages };
}

const first = await once('ibx_00000000000000000000000000');
const maxRssMb = process.resourceUsage().maxRSS / 1024;
// Again as another inbox: an empty index for it, in the same store.
const again = await once('ibx_00000000000000000000000001');
process.stdout.write(`${JSON.stringify({ ms: first.ms, messages: first.messages, maxRssMb, baseRssMb, againMs: again.ms })}\n`);
