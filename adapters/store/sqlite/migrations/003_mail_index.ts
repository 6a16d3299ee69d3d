// The per-inbox mailbox index (docs/mail.md, "The index"): labels, messages and where each message is. It
// mirrors Dovecot and can be rebuilt from it at any time (a lost index is re-seeded silently).
export default `
CREATE TABLE mail_inboxes (
  inbox_id        TEXT PRIMARY KEY,
  seeded          INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE mail_labels (
  inbox_id        TEXT NOT NULL,
  guid            TEXT NOT NULL,            -- mailbox GUID, 32 hex digits (lbl_ id)
  path            TEXT NOT NULL,
  special_use     TEXT,
  uid_validity    INTEGER NOT NULL,
  uid_next        INTEGER NOT NULL,         -- every UID below it is indexed
  highest_modseq  INTEGER NOT NULL,         -- every change up to it is applied
  PRIMARY KEY (inbox_id, guid)
);

CREATE TABLE mail_messages (
  inbox_id        TEXT NOT NULL,
  guid            TEXT NOT NULL,            -- message GUID, 32 hex digits (msg_ id)
  size            INTEGER NOT NULL,
  received_at     INTEGER NOT NULL,
  date            TEXT,
  from_text       TEXT,
  to_text         TEXT,
  cc_text         TEXT,
  reply_to_text   TEXT,
  subject         TEXT,
  message_id      TEXT,
  in_reply_to     TEXT,
  from_address    TEXT,
  PRIMARY KEY (inbox_id, guid)
) WITHOUT ROWID;

-- A message in a label. IMAP flags are per mailbox, so they live here.
CREATE TABLE mail_locations (
  inbox_id        TEXT NOT NULL,
  label_guid      TEXT NOT NULL,
  uid             INTEGER NOT NULL,
  msg_guid        TEXT NOT NULL,
  modseq          INTEGER NOT NULL,
  flags           TEXT NOT NULL,            -- JSON array of IMAP flags and keywords
  seen            INTEGER NOT NULL,
  PRIMARY KEY (inbox_id, label_guid, uid)
) WITHOUT ROWID;
CREATE INDEX mail_locations_message ON mail_locations(inbox_id, msg_guid);
`;
