// Reading what the SMTP sink received (written by scripts/sink.ts).
import * as fs from 'node:fs/promises';
import * as path from 'node:path';
import type { MailEnv } from './env.ts';
import { errCode } from './util.ts';

export interface SinkMessage {
  id: string;
  mailFrom: string;
  rcptTo: string[];
  envid?: string;
  receivedAt: string;
  raw: Buffer;
}

interface SinkMeta {
  id: string;
  mailFrom: string;
  rcptTo: string[];
  envid?: string | null;
  receivedAt: string;
}

/** What the sink received so far, oldest first. */
export async function readSink(env: MailEnv): Promise<SinkMessage[]> {
  const names = await fs.readdir(env.sink.dir).catch((e: unknown) => {
    if (errCode(e) === 'ENOENT') return [] as string[];
    throw e;
  });
  const messages: SinkMessage[] = [];
  // The sink writes <id>.eml before <id>.json, each by rename, so a .json means a whole message.
  for (const name of names.filter((n) => n.endsWith('.json'))) {
    const meta = JSON.parse(await fs.readFile(path.join(env.sink.dir, name), 'utf8')) as SinkMeta;
    const raw = await fs.readFile(path.join(env.sink.dir, `${meta.id}.eml`));
    const msg: SinkMessage = { id: meta.id, mailFrom: meta.mailFrom, rcptTo: meta.rcptTo, receivedAt: meta.receivedAt, raw };
    if (meta.envid) msg.envid = meta.envid;
    messages.push(msg);
  }
  return messages.sort((a, b) => a.receivedAt.localeCompare(b.receivedAt) || a.id.localeCompare(b.id));
}
