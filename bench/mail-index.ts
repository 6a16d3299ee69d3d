// One initial index of an inbox in a process of its own, so its peak RSS is the index's:
//   node --import tsx bench/mail-index.ts USER     (configured by the POSTERN_* variables)
// Prints { ms, messages, maxRssMb, baseRssMb, againMs } as JSON.
import { pino } from 'pino';
import { openDb } from '../adapters/store/sqlite/db.ts';
import { SqliteMailIndex } from '../adapters/store/sqlite/mail-index.ts';
import { ImapMailSource } from '../adapters/imap/source.ts';
import { loadConfig } from '../lib/config.ts';

const user = process.argv[2];
if (!user) throw new Error('usage: mail-index.ts USER');
const config = loadConfig();
const baseRssMb = process.memoryUsage().rss / 2 ** 20;

async function once(file: string): Promise<{ ms: number; messages: number }> {
  const db = openDb(file);
  const store = new SqliteMailIndex(db);
  const source = new ImapMailSource({ imap: config.imap, store, log: pino({ level: 'warn' }) });
  const inbox = { id: 'ibx_00000000000000000000000000', imapUser: user!, addresses: [user!] };
  const t = performance.now();
  // One pass, as the first read of an inbox makes (an unseeded index is never trusted).
  await source.sync(inbox, () => undefined);
  const ms = performance.now() - t;
  let messages = 0;
  for (const c of (await store.counts(inbox.id)).values()) messages += c.total;
  await source.close();
  db.close();
  return { ms, messages };
}

const first = await once(config.dbFile);
const maxRssMb = process.resourceUsage().maxRSS / 1024;
const again = await once(`${config.dbFile}.again`);
process.stdout.write(`${JSON.stringify({ ms: first.ms, messages: first.messages, maxRssMb, baseRssMb, againMs: again.ms })}\n`);
