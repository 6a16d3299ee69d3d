// A label being re-seeded (new UIDVALIDITY) is refilled here first, beside its old locations, and
// swapped in by one transaction once the refill is complete: a read never sees the label half
// filled, and a refill that fails leaves the old locations (and their ids) in place.
export default `
CREATE TABLE mail_staged_locations (
  inbox_id        TEXT NOT NULL,
  label_guid      TEXT NOT NULL,
  uid             INTEGER NOT NULL,
  msg_guid        TEXT NOT NULL,
  modseq          INTEGER NOT NULL,
  flags           TEXT NOT NULL,
  seen            INTEGER NOT NULL,
  PRIMARY KEY (inbox_id, label_guid, uid)
) WITHOUT ROWID;
CREATE INDEX mail_staged_locations_message ON mail_staged_locations(inbox_id, msg_guid);
`;
