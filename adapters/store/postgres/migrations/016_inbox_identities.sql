-- Identities (docs/sending.md, "Identities"): per address of an inbox, the display name and the
-- signature JSON compose uses. A row only for an address its owners set; the others have none.
CREATE TABLE inbox_identities (
  inbox_id        TEXT NOT NULL REFERENCES inboxes (id),
  address         TEXT NOT NULL,            -- lower case, one of the inbox's addresses
  display_name    TEXT,
  signature_text  TEXT,
  signature_html  TEXT,
  updated_at      BIGINT NOT NULL,
  PRIMARY KEY (inbox_id, address)
);
