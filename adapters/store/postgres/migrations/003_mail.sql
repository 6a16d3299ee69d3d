-- The mail side: the per-inbox mailbox index (labels, messages, where each message is, the
-- staging of a label being re-seeded), the watch (leases, the inbox catalog, reports), the send
-- outbox with its Sent copies, owners and per-minute sending counts, and the re-sealing jobs:
-- the SQLite schema after its migrations 003, 005-007, 011, 018-023, in PostgreSQL's types and
-- with SQLite's names. IMAP UIDs, UIDVALIDITY (unsigned 32-bit) and MODSEQs (63-bit) are BIGINT.

-- The index mirrors Dovecot and can be rebuilt from it at any time. `version` is bumped in the
-- same transaction as each index write, so results cached by any process see every other
-- process's writes. `removed_at`: the inbox was removed and every later index write is refused.
CREATE TABLE mail_inboxes (
  inbox_id        TEXT PRIMARY KEY,
  seeded          BOOLEAN NOT NULL DEFAULT false,
  version         BIGINT NOT NULL DEFAULT 0,
  synced_at       BIGINT,                   -- the last sync pass that worked; NULL: never
  removed_at      BIGINT,
  hinted_at       BIGINT                    -- the last push hint for it
);

CREATE TABLE mail_labels (
  inbox_id        TEXT NOT NULL,
  guid            TEXT NOT NULL,            -- mailbox GUID, 32 hex digits (lbl_ id)
  path            TEXT NOT NULL,
  special_use     TEXT,
  uid_validity    BIGINT NOT NULL,
  uid_next        BIGINT NOT NULL,          -- every UID below it is indexed
  highest_modseq  BIGINT NOT NULL,          -- every change up to it is applied
  fill_low        BIGINT,                   -- first fill, newest first: indexed from here up; NULL: complete
  PRIMARY KEY (inbox_id, guid)
);

CREATE TABLE mail_messages (
  inbox_id        TEXT NOT NULL,
  guid            TEXT NOT NULL,            -- message GUID, 32 hex digits (msg_ id)
  size            BIGINT NOT NULL,
  received_at     BIGINT NOT NULL,
  date            TEXT,
  from_text       TEXT,
  to_text         TEXT,
  cc_text         TEXT,
  reply_to_text   TEXT,
  subject         TEXT,
  message_id      TEXT,
  in_reply_to     TEXT,
  from_address    TEXT,
  -- true: PGP/MIME (no plaintext), false: plaintext, NULL: not known yet (SQLite: 1, 0, NULL).
  sealed          BOOLEAN,
  PRIMARY KEY (inbox_id, guid)
);
CREATE INDEX mail_messages_unsealed ON mail_messages (inbox_id, guid) WHERE sealed IS NOT TRUE;

-- A message in a label. IMAP flags are per mailbox, so they live here. `flags` is a JSON array
-- read and written whole, never queried inside: TEXT.
CREATE TABLE mail_locations (
  inbox_id        TEXT NOT NULL,
  label_guid      TEXT NOT NULL,
  uid             BIGINT NOT NULL,
  msg_guid        TEXT NOT NULL,
  modseq          BIGINT NOT NULL,
  flags           TEXT NOT NULL,
  seen            BOOLEAN NOT NULL,
  PRIMARY KEY (inbox_id, label_guid, uid)
);
CREATE INDEX mail_locations_message ON mail_locations (inbox_id, msg_guid);

-- A label being re-seeded (new UIDVALIDITY) is refilled here first and swapped in by one
-- transaction once complete: a read never sees the label half filled.
CREATE TABLE mail_staged_locations (
  inbox_id        TEXT NOT NULL,
  label_guid      TEXT NOT NULL,
  uid             BIGINT NOT NULL,
  msg_guid        TEXT NOT NULL,
  modseq          BIGINT NOT NULL,
  flags           TEXT NOT NULL,
  seen            BOOLEAN NOT NULL,
  PRIMARY KEY (inbox_id, label_guid, uid)
);
CREATE INDEX mail_staged_locations_message ON mail_staged_locations (inbox_id, msg_guid);

-- Of the processes sharing the store, one at a time holds an inbox's IMAP watcher, renewing its
-- row before `expires_at`; the others take over once it lapses.
CREATE TABLE mail_watch_leases (
  inbox_id        TEXT PRIMARY KEY,
  holder          TEXT NOT NULL,            -- the holding process's id
  expires_at      BIGINT NOT NULL
);

-- Goes up with every inbox added or removed, in the same transaction whoever writes: a running
-- `serve` polls this one row and so learns of another process's inbox add/remove at once.
CREATE TABLE inbox_catalog (
  id        INTEGER PRIMARY KEY CHECK (id = 1),
  version   BIGINT NOT NULL
);
INSERT INTO inbox_catalog (id, version) VALUES (1, 0);
CREATE FUNCTION inbox_catalog_bump() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE inbox_catalog SET version = version + 1 WHERE id = 1;
  RETURN NULL;
END
$$;
CREATE TRIGGER inbox_catalog_added AFTER INSERT ON inboxes FOR EACH ROW EXECUTE FUNCTION inbox_catalog_bump();
CREATE TRIGGER inbox_catalog_removed AFTER DELETE ON inboxes FOR EACH ROW EXECUTE FUNCTION inbox_catalog_bump();

-- What each running `serve` says of its watch, for `postern admin inbox status`. `report` is
-- JSON (WatchReport) read and written whole: TEXT.
CREATE TABLE watch_reports (
  origin      TEXT PRIMARY KEY,             -- the serve process
  report      TEXT NOT NULL,
  updated_at  BIGINT NOT NULL
);

-- One row per send, reserved before the relay sees the message: keeps a /send draft from going
-- out twice (UNIQUE inbox + draft; NULL drafts never clash), counts toward the sending rate, and
-- its id is the DSN ENVID bounces are matched by. `outcome = 'unknown'`: the final reply was
-- lost (never relayed again); `owner` names the process that reserved or last claimed it.
CREATE TABLE mail_outbox (
  id              TEXT PRIMARY KEY,         -- 32 hex digits; the DSN ENVID
  inbox_id        TEXT NOT NULL,
  project_id      TEXT NOT NULL,
  actor           TEXT NOT NULL,            -- tok_/mem_ who sent it
  draft_id        TEXT,                     -- /send only
  fingerprint     TEXT,                     -- hash of the /send request
  state           TEXT NOT NULL,            -- relaying | filing | filed (and sending)
  mail_from       TEXT NOT NULL,
  recipients      INTEGER NOT NULL,
  message_id      TEXT NOT NULL,
  size            BIGINT NOT NULL,
  attempts        INTEGER NOT NULL DEFAULT 0,
  next_attempt_at BIGINT NOT NULL,
  created_at      BIGINT NOT NULL,
  filed_at        BIGINT,
  claims          INTEGER NOT NULL DEFAULT 0, -- filing attempts started
  outcome         TEXT,                     -- NULL, or 'unknown'
  owner           TEXT,                     -- mail_outbox_owners.id
  UNIQUE (inbox_id, draft_id)
);
CREATE INDEX mail_outbox_rate ON mail_outbox (inbox_id, created_at);
CREATE INDEX mail_outbox_due ON mail_outbox (state, next_attempt_at);
CREATE INDEX mail_outbox_unsettled ON mail_outbox (owner, state) WHERE state <> 'filed';

-- The Sent copy of a send until Dovecot took it, in parts of at most 1 MB (0, 1, ... in order).
CREATE TABLE mail_outbox_copies (
  id    TEXT NOT NULL,                      -- mail_outbox.id
  part  INTEGER NOT NULL,
  bytes BYTEA NOT NULL,
  PRIMARY KEY (id, part)
);

CREATE TABLE mail_outbox_owners (
  id         TEXT PRIMARY KEY,              -- random per process
  host       TEXT NOT NULL,                 -- hostname and kernel boot id
  pid        INTEGER NOT NULL,
  pid_start  TEXT NOT NULL,                 -- the process's start time as the kernel has it ('' if unknown)
  seen_at    BIGINT NOT NULL                -- refreshed while it runs
);

-- The per-inbox sending rate, counted per minute (created_at / 60000, floored).
CREATE TABLE mail_send_minutes (
  inbox_id  TEXT NOT NULL,
  minute    BIGINT NOT NULL,
  sends     INTEGER NOT NULL,
  PRIMARY KEY (inbox_id, minute)
);

-- Durable sealing of zero-access inboxes: each place (inbox, label GUID, UIDVALIDITY, UID) of an
-- unsealed message some process has worked on. Held by one process until lease_until; a failed
-- attempt sets next_at (backing off) and gives the lease back; done_at set: replaced or found sealed.
CREATE TABLE reseal_jobs (
  inbox_id     TEXT NOT NULL,
  label_guid   TEXT NOT NULL,
  uid_validity BIGINT NOT NULL,
  uid          BIGINT NOT NULL,
  holder       TEXT,
  lease_until  BIGINT NOT NULL DEFAULT 0,
  attempts     INTEGER NOT NULL DEFAULT 0,
  next_at      BIGINT NOT NULL DEFAULT 0,
  last_error   TEXT,
  done_at      BIGINT,
  PRIMARY KEY (inbox_id, label_guid, uid_validity, uid)
);
CREATE INDEX reseal_jobs_done ON reseal_jobs (done_at) WHERE done_at IS NOT NULL;
