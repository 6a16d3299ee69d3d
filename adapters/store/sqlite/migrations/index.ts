// Every migration, in order. A migration is never edited once released: add the next one.
import directory from './001_directory.ts';
import events from './002_events.ts';
import mailIndex from './003_mail_index.ts';
import eventsInbox from './004_events_inbox.ts';
import mailStaging from './005_mail_staging.ts';
import mailVersion from './006_mail_version.ts';
import mailWatchLeases from './007_mail_watch_leases.ts';

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

export const migrations: Migration[] = [
  { version: 1, name: 'directory', sql: directory },
  { version: 2, name: 'events', sql: events },
  { version: 3, name: 'mail_index', sql: mailIndex },
  { version: 4, name: 'events_inbox', sql: eventsInbox },
  { version: 5, name: 'mail_staging', sql: mailStaging },
  { version: 6, name: 'mail_version', sql: mailVersion },
  { version: 7, name: 'mail_watch_leases', sql: mailWatchLeases },
];
