// The port for a message's bytes as the mail server holds them: what `/raw`, `/source`,
// `/content` and attachments are made from. Streamed, so memory never depends on message size.
import type { Readable } from 'node:stream';
import type { MailInbox } from './types.ts';

export interface MessageBodies {
  /**
   * The message at `uid` in the label: its whole RFC 5322 bytes, or with `part` one MIME part
   * (IMAP section, e.g. "2"), transfer-decoded. Null when it is not there (expunged meanwhile).
   */
  open(inbox: MailInbox, at: { labelGuid: string; uid: number }, part?: string): Promise<Readable | null>;
}
