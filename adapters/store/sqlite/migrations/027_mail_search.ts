// Message search (docs/search.md, lib/mail/search.ts). The From, To, Cc and Subject of every indexed
// message go into an FTS5 index (unicode61 with diacritics removed: case- and accent-insensitive,
// an address's parts are words), kept in step with mail_messages by triggers, so every write
// that adds or drops a message updates it in the same transaction. mail_messages has no rowid:
// mail_search_docs gives each message the integer FTS5 keys rows by. Contentless: the text is
// mail_messages'; the FTS index holds only its words.
export default `
ALTER TABLE mail_messages ADD COLUMN has_attachment INTEGER;   -- 1, 0, NULL: cannot tell (sealed) or indexed before
CREATE INDEX mail_messages_received ON mail_messages(inbox_id, received_at, guid);

CREATE TABLE mail_search_docs (
  id        INTEGER PRIMARY KEY,
  inbox_id  TEXT NOT NULL,
  guid      TEXT NOT NULL,
  UNIQUE (inbox_id, guid)
);
CREATE VIRTUAL TABLE mail_search USING fts5(
  from_text, to_text, cc_text, subject,
  content = '', contentless_delete = 1, tokenize = 'unicode61 remove_diacritics 2'
);

CREATE TRIGGER mail_search_insert AFTER INSERT ON mail_messages BEGIN
  INSERT INTO mail_search_docs (inbox_id, guid) VALUES (new.inbox_id, new.guid);
  INSERT INTO mail_search (rowid, from_text, to_text, cc_text, subject)
    VALUES ((SELECT id FROM mail_search_docs WHERE inbox_id = new.inbox_id AND guid = new.guid), new.from_text, new.to_text, new.cc_text, new.subject);
END;
CREATE TRIGGER mail_search_delete AFTER DELETE ON mail_messages BEGIN
  DELETE FROM mail_search WHERE rowid = (SELECT id FROM mail_search_docs WHERE inbox_id = old.inbox_id AND guid = old.guid);
  DELETE FROM mail_search_docs WHERE inbox_id = old.inbox_id AND guid = old.guid;
END;

-- What was indexed before.
INSERT INTO mail_search_docs (inbox_id, guid) SELECT inbox_id, guid FROM mail_messages;
INSERT INTO mail_search (rowid, from_text, to_text, cc_text, subject)
  SELECT d.id, m.from_text, m.to_text, m.cc_text, m.subject FROM mail_messages m JOIN mail_search_docs d ON d.inbox_id = m.inbox_id AND d.guid = m.guid;
`;
