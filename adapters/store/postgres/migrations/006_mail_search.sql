-- Message search (docs/search.md, lib/mail/search.ts): SQLite's migration 027 in PostgreSQL's terms.
-- `search` is the text index: From, To, Cc and Subject as weights A, B, C and D of one tsvector,
-- built by the adapter from lib/mail/search-words.ts (SQLite's tokenizer's rules: lower case,
-- Latin accents dropped, every address part a word), so both engines agree on what a word is
-- whatever the database's locale.
-- NULL: a row from before, filled on its inbox's next search (or its next write).
ALTER TABLE mail_messages ADD COLUMN has_attachment BOOLEAN;   -- NULL: cannot tell (sealed) or indexed before
ALTER TABLE mail_messages ADD COLUMN search TSVECTOR;
CREATE INDEX mail_messages_search ON mail_messages USING gin (search);
CREATE INDEX mail_messages_unsearchable ON mail_messages (inbox_id) WHERE search IS NULL;
CREATE INDEX mail_messages_received ON mail_messages (inbox_id, received_at, guid);
