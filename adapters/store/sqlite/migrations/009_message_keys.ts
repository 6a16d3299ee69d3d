// Per message, its session key sealed to an epoch key (the detail's `wrappedDek`), made the first
// time it is asked for in a compatible inbox. Keyed by Dovecot's GUID: the same in every label.
export default `
CREATE TABLE message_keys (
  inbox_id        TEXT NOT NULL REFERENCES inboxes(id),
  msg_guid        TEXT NOT NULL,
  epoch           INTEGER NOT NULL,
  wrapped_dek     BLOB NOT NULL,            -- binary PKESK packet(s)
  created_at      INTEGER NOT NULL,
  PRIMARY KEY (inbox_id, msg_guid)
) WITHOUT ROWID;
`;
