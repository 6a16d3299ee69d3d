// The text index grouped by inbox (docs/search.md, "The text index"): each word is held as its
// inbox's mark followed by the word (lib/mail/search-words.ts, markedWords), so a MATCH, a
// one-letter prefix included, reads only the terms of the inbox searched. Migration 027's index
// held bare words: a prefix read every inbox's terms before the inbox filter.
//
// The words are made by postern_search_words(inbox_id, text), a function every connection of
// Postern's registers (db.ts): a connection without it (the sqlite3 shell) cannot add messages.
// The tokenizer is `ascii`: the text it is given is already the words, space-separated.
//
// Rows indexed before stay in mail_search_docs with `marked` 0 and are put in the new index on
// their inbox's first search with words, a few hundred per transaction (SqliteMailIndex), so
// this migration is quick however large the store is.
export default `
DROP TRIGGER mail_search_insert;
DROP TRIGGER mail_search_delete;
DROP TABLE mail_search;
CREATE VIRTUAL TABLE mail_search USING fts5(
  from_text, to_text, cc_text, subject,
  content = '', contentless_delete = 1, tokenize = 'ascii'
);
ALTER TABLE mail_search_docs ADD COLUMN marked INTEGER NOT NULL DEFAULT 0;
CREATE INDEX mail_search_unmarked ON mail_search_docs(inbox_id) WHERE marked = 0;

CREATE TRIGGER mail_search_insert AFTER INSERT ON mail_messages BEGIN
  INSERT INTO mail_search_docs (inbox_id, guid, marked) VALUES (new.inbox_id, new.guid, 1);
  INSERT INTO mail_search (rowid, from_text, to_text, cc_text, subject)
    VALUES ((SELECT id FROM mail_search_docs WHERE inbox_id = new.inbox_id AND guid = new.guid),
      postern_search_words(new.inbox_id, new.from_text), postern_search_words(new.inbox_id, new.to_text),
      postern_search_words(new.inbox_id, new.cc_text), postern_search_words(new.inbox_id, new.subject));
END;
CREATE TRIGGER mail_search_delete AFTER DELETE ON mail_messages BEGIN
  DELETE FROM mail_search WHERE rowid = (SELECT id FROM mail_search_docs WHERE inbox_id = old.inbox_id AND guid = old.guid AND marked = 1);
  DELETE FROM mail_search_docs WHERE inbox_id = old.inbox_id AND guid = old.guid;
END;
`;
