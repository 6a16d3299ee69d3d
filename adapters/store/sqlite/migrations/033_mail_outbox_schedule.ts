// Scheduled and undoable sends (docs/sending.md, "Send later"): a send with a send time or an
// undo hold waits in the outbox in state `scheduled` (due at next_attempt_at, the later of the
// two) with its envelope, and a sealed send with its /send body in mail_outbox_sealed (in parts,
// as the copies are), so it is opened only at its time. `failure` says why a `failed` one never went.
export default `
ALTER TABLE mail_outbox ADD COLUMN send_at INTEGER;      -- ms since the epoch; NULL: sent at once
ALTER TABLE mail_outbox ADD COLUMN hold_until INTEGER;   -- the undo hold's end; NULL: none
ALTER TABLE mail_outbox ADD COLUMN envelope TEXT;        -- JSON array of RCPT TO, until relayed
ALTER TABLE mail_outbox ADD COLUMN sealed TEXT;          -- JSON {draftId, epoch, wrappedDek} of a sealed send
ALTER TABLE mail_outbox ADD COLUMN failure TEXT;         -- state 'failed': the reason
CREATE TABLE mail_outbox_sealed (
  id    TEXT NOT NULL,                                   -- mail_outbox.id
  part  INTEGER NOT NULL,                                -- 0, 1, ... in order
  bytes BLOB NOT NULL,                                   -- the ciphertext
  PRIMARY KEY (id, part)
);
`;
