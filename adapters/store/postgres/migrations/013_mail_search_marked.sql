-- The text index grouped by inbox, as SQLite's migration 029: each word of `search` is its
-- inbox's mark followed by the word (lib/mail/search-words.ts, markedWords), so the GIN index's
-- entries of one inbox sit together and a search, a prefix one included, reads only those of the
-- inbox searched. Migration 006's vectors held bare words: `'a':*` read every inbox's entries.
-- The old vectors are dropped, not rewritten here (dropping a column is quick whatever the
-- table's size; the index builds over NULLs): a row gets its new vector on its inbox's next
-- search with words, a few hundred per statement, or on its next write, as after migration 006.
-- Reads go on meanwhile; the index builds hold back writes of mail_messages, not reads.
ALTER TABLE mail_messages DROP COLUMN search;
ALTER TABLE mail_messages ADD COLUMN search TSVECTOR;
CREATE INDEX mail_messages_search ON mail_messages USING gin (search);
CREATE INDEX mail_messages_unsearchable ON mail_messages (inbox_id) WHERE search IS NULL;
