// The Sent copies move out of mail_outbox into their own table, in parts of at most 1 MB.
// SQLite rewrites a whole row on every UPDATE, so each state change of a send (relayed, claimed,
// retried, filed) rewrote its copy too, up to 25 MB each time; and a 25 MB value is built whole
// in memory (bound, then serialized as one record) to be written, and again to be read. In parts,
// the copy is written once, read a part at a time, and deleted once (bench:send).
// `claims` counts the filing attempts started, so the first one (which cannot find an earlier
// copy in Sent) skips the search for it.
export default `
CREATE TABLE mail_outbox_copies (
  id    TEXT NOT NULL,                      -- mail_outbox.id
  part  INTEGER NOT NULL,                   -- 0, 1, ... in order
  bytes BLOB NOT NULL,
  PRIMARY KEY (id, part)
);
INSERT INTO mail_outbox_copies (id, part, bytes) SELECT id, 0, copy FROM mail_outbox WHERE copy IS NOT NULL;
ALTER TABLE mail_outbox DROP COLUMN copy;
ALTER TABLE mail_outbox ADD COLUMN claims INTEGER NOT NULL DEFAULT 0;
`;
