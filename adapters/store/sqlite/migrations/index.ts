// Every migration, in order. A migration is never edited once released: add the next one.
//
// The numbers have gaps (12, 14 and 15 are unused). That is harmless: the runner (db.ts)
// applies every listed version not yet in schema_migrations, in list order, and never looks for
// the missing ones. Do not fill a gap: a store already past it would apply the new migration
// after later ones, in another order than a fresh store. A new migration takes the next number
// above the highest.
import directory from './001_directory.ts';
import events from './002_events.ts';
import mailIndex from './003_mail_index.ts';
import eventsInbox from './004_events_inbox.ts';
import mailStaging from './005_mail_staging.ts';
import mailVersion from './006_mail_version.ts';
import mailWatchLeases from './007_mail_watch_leases.ts';
import keys from './008_keys.ts';
import messageKeys from './009_message_keys.ts';
import ingress from './010_ingress.ts';
import mailOutbox from './011_mail_outbox.ts';
import eventCursorSecret from './013_event_cursor_secret.ts';
import passkeys from './016_passkeys.ts';
import memberKeyBlobs from './017_member_key_blobs.ts';
import mailSyncedAt from './018_mail_synced_at.ts';
import mailOutboxCopies from './019_mail_outbox_copies.ts';
import watchCatalog from './020_watch_catalog.ts';
import mailSendMinutes from './021_mail_send_minutes.ts';
import resealJobs from './022_reseal_jobs.ts';
import mailOutboxOutcome from './023_mail_outbox_outcome.ts';
import reauthChallenges from './024_reauth_challenges.ts';
import webhooks from './025_webhooks.ts';
import webhookDeliveries from './026_webhook_deliveries.ts';
import mailSearch from './027_mail_search.ts';
import webhookDeliveryPositions from './028_webhook_delivery_positions.ts';
import mailSearchMarked from './029_mail_search_marked.ts';
import webhookDisabledBy from './030_webhook_disabled_by.ts';
import mailThreads from './031_mail_threads.ts';
import inboxIdentities from './032_inbox_identities.ts';
import mailOutboxSchedule from './033_mail_outbox_schedule.ts';
import sessionDevices from './034_session_devices.ts';
import keyHandovers from './035_key_handovers.ts';

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
  { version: 8, name: 'keys', sql: keys },
  { version: 9, name: 'message_keys', sql: messageKeys },
  { version: 10, name: 'ingress', sql: ingress },
  { version: 11, name: 'mail_outbox', sql: mailOutbox },
  { version: 13, name: 'event_cursor_secret', sql: eventCursorSecret },
  { version: 16, name: 'passkeys', sql: passkeys },
  { version: 17, name: 'member_key_blobs', sql: memberKeyBlobs },
  { version: 18, name: 'mail_synced_at', sql: mailSyncedAt },
  { version: 19, name: 'mail_outbox_copies', sql: mailOutboxCopies },
  { version: 20, name: 'watch_catalog', sql: watchCatalog },
  { version: 21, name: 'mail_send_minutes', sql: mailSendMinutes },
  { version: 22, name: 'reseal_jobs', sql: resealJobs },
  { version: 23, name: 'mail_outbox_outcome', sql: mailOutboxOutcome },
  { version: 24, name: 'reauth_challenges', sql: reauthChallenges },
  { version: 25, name: 'webhooks', sql: webhooks },
  { version: 26, name: 'webhook_deliveries', sql: webhookDeliveries },
  { version: 27, name: 'mail_search', sql: mailSearch },
  { version: 28, name: 'webhook_delivery_positions', sql: webhookDeliveryPositions },
  { version: 29, name: 'mail_search_marked', sql: mailSearchMarked },
  { version: 30, name: 'webhook_disabled_by', sql: webhookDisabledBy },
  { version: 31, name: 'mail_threads', sql: mailThreads },
  { version: 32, name: 'inbox_identities', sql: inboxIdentities },
  { version: 33, name: 'mail_outbox_schedule', sql: mailOutboxSchedule },
  { version: 34, name: 'session_devices', sql: sessionDevices },
  { version: 35, name: 'key_handovers', sql: keyHandovers },
];
