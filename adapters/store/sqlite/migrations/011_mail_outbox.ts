// The send outbox (lib/send): one row per send, reserved before the relay sees the message. It
// holds the Sent copy until Dovecot took it, keeps a /send draft from going out twice
// (UNIQUE inbox + draft; NULL drafts never clash), counts toward the per-inbox sending rate,
// and its id is the DSN ENVID that bounces are matched by.
export default `
CREATE TABLE mail_outbox (
  id              TEXT PRIMARY KEY,         -- 32 hex digits; the DSN ENVID
  inbox_id        TEXT NOT NULL,
  project_id      TEXT NOT NULL,
  actor           TEXT NOT NULL,            -- tok_/mem_ who sent it
  draft_id        TEXT,                     -- /send only
  fingerprint     TEXT,                     -- hash of the /send request
  state           TEXT NOT NULL,            -- relaying | filing | filed
  mail_from       TEXT NOT NULL,
  recipients      INTEGER NOT NULL,
  message_id      TEXT NOT NULL,
  size            INTEGER NOT NULL,
  copy            BLOB,                     -- the Sent copy, until filed
  attempts        INTEGER NOT NULL DEFAULT 0,
  next_attempt_at INTEGER NOT NULL,         -- ms since the epoch
  created_at      INTEGER NOT NULL,
  filed_at        INTEGER,
  UNIQUE (inbox_id, draft_id)
);
CREATE INDEX mail_outbox_rate ON mail_outbox (inbox_id, created_at);
CREATE INDEX mail_outbox_due ON mail_outbox (state, next_attempt_at);
`;
