// The watcher lease (docs/mail.md, "Across processes"): of the processes sharing the store, one at a time holds an
// inbox's IMAP watcher, renewing its row before `expires_at`; the others take over once it lapses.
export default `
CREATE TABLE mail_watch_leases (
  inbox_id        TEXT PRIMARY KEY,
  holder          TEXT NOT NULL,            -- the holding process's id
  expires_at      INTEGER NOT NULL          -- ms since the epoch
) WITHOUT ROWID;
`;
