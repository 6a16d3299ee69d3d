// Durable sealing of zero-access inboxes (lib/mail/resealing.ts): the index knows which messages
// hold no plaintext, and each place of one that does is a job with a lease, retried until done.
export default `
-- 1: PGP/MIME (sealed by Postern or its sender: no plaintext), 0: plaintext, NULL: not known
-- (indexed before this column existed; the resealer reads it once to tell).
ALTER TABLE mail_messages ADD COLUMN sealed INTEGER;
CREATE INDEX mail_messages_unsealed ON mail_messages(inbox_id, guid) WHERE sealed IS NOT 1;

-- The old claims were forever (a crash left the message unsealed for good): replaced by jobs.
DROP TABLE reseal_claims;
-- One row per place of an unsealed message some process has worked on (inbox, label GUID,
-- UIDVALIDITY, UID name it for good). Held by one process until lease_until; a failed attempt
-- sets next_at (backing off) and gives the lease back; done_at set: replaced (or found sealed).
CREATE TABLE reseal_jobs (
  inbox_id     TEXT NOT NULL,
  label_guid   TEXT NOT NULL,
  uid_validity INTEGER NOT NULL,
  uid          INTEGER NOT NULL,
  holder       TEXT,
  lease_until  INTEGER NOT NULL DEFAULT 0,
  attempts     INTEGER NOT NULL DEFAULT 0,
  next_at      INTEGER NOT NULL DEFAULT 0,
  last_error   TEXT,
  done_at      INTEGER,
  PRIMARY KEY (inbox_id, label_guid, uid_validity, uid)
) WITHOUT ROWID;
CREATE INDEX reseal_jobs_done ON reseal_jobs(done_at) WHERE done_at IS NOT NULL;
`;
