// What Postern keeps outside the mail server, as one unit: every store port, opened together on
// one engine (adapters/store/sqlite/store.ts, adapters/store/postgres/store.ts), with its own
// health check, its own background upkeep and one close. lib/server.ts builds Postern from it;
// nothing outside adapters/store/ knows which engine it is beyond the name.
import type { PasskeyStore } from './auth/ports.ts';
import type { KeyBackupStore, KeyHandoverStore } from './crypto/ports.ts';
import type { EpochKeyStore, MemberKeyStore, MessageKeyStore } from './crypto/ports.ts';
import type { DirectoryStore } from './directory/ports.ts';
import type { EventStore } from './events/ports.ts';
import type { ResealJobs } from './mail/resealing.ts';
import type { MailIndexStore, WatchLeases, WatchReports } from './mail/ports.ts';
import type { IdentityStore, OutboxStore } from './send/ports.ts';
import type { WebhookStore } from './webhooks/ports.ts';

export type StoreEngine = 'sqlite' | 'postgres';

export interface Store {
  readonly engine: StoreEngine;
  /** Where it is, for people: the SQLite file, or the PostgreSQL URL without its password. */
  readonly location: string;
  directory: DirectoryStore;
  keys: EpochKeyStore & MemberKeyStore & MessageKeyStore;
  keyBackups: KeyBackupStore;
  /** A new device's key, handed over sealed by a signed-in one (docs/app.md, "A new device"). */
  keyHandovers: KeyHandoverStore;
  passkeys: PasskeyStore;
  events: EventStore;
  mailIndex: MailIndexStore & WatchLeases & WatchReports;
  outbox: OutboxStore;
  resealJobs: ResealJobs;
  webhooks: WebhookStore;
  /** Per inbox address: display name and signature (docs/sending.md, "Identities"). */
  identities: IdentityStore;
  /**
   * Whether this process serves the reads it keeps now (PostgreSQL: its listening connection heard
   * a heartbeat lately, docs/deployment.md "Kept reads"); null: it keeps none.
   */
  keptReadsServed(): boolean | null;
  /** Resolves when the store answers a query; rejects with why not (GET /healthz). */
  health(): Promise<void>;
  /**
   * Starts what a serving process does for the store in the background (SQLite: checkpoints the
   * WAL off the serving thread). `onError` hears upkeep that failed and fell back.
   */
  startUpkeep(onError: (err: Error) => void): void;
  /** Stops the upkeep and closes every connection. Idempotent. */
  close(): Promise<void>;
}
