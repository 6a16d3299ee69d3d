// Sends exactly once when a reply is lost or a process dies mid-send (docs/sending.md, "Exactly
// once"). A row is `sending` once its bytes may be written, so a process starting up can tell a
// send that never left (dropped: its draft may go again) from one Postfix may have queued
// (`outcome = 'unknown'`: never relayed again, its Sent copy filed). `owner` names the process
// that reserved or last claimed a row, and mail_outbox_owners how to tell whether it still runs.
export default `
ALTER TABLE mail_outbox ADD COLUMN outcome TEXT;   -- NULL, or 'unknown': the final reply was lost
ALTER TABLE mail_outbox ADD COLUMN owner TEXT;     -- mail_outbox_owners.id; NULL for rows before this
CREATE INDEX mail_outbox_unsettled ON mail_outbox (owner, state) WHERE state <> 'filed';
CREATE TABLE mail_outbox_owners (
  id         TEXT PRIMARY KEY,                       -- random per process
  host       TEXT NOT NULL,                          -- hostname and kernel boot id
  pid        INTEGER NOT NULL,
  pid_start  TEXT NOT NULL,                          -- the process's start time as the kernel has it ('' if unknown)
  seen_at    INTEGER NOT NULL                        -- ms since the epoch, refreshed while it runs
);
`;
