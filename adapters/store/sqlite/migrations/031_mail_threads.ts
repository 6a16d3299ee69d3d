// Threads and previews (docs/threads.md). Each message's thread is its founder's GUID, set once
// when the index first holds the message (NULL: not placed yet; rows from before this migration
// are placed in the background, oldest first, SqliteMailIndex.backfillThreads). The ids a
// message's References and In-Reply-To name are kept in mail_thread_links, so a parent indexed
// after its reply finds it. `preview` is a compatible inbox's short text of the body.
export default `
ALTER TABLE mail_messages ADD COLUMN thread_guid TEXT;
ALTER TABLE mail_messages ADD COLUMN preview TEXT;
CREATE INDEX mail_messages_thread ON mail_messages(inbox_id, thread_guid);
CREATE INDEX mail_messages_message_id ON mail_messages(inbox_id, message_id) WHERE message_id IS NOT NULL;
CREATE INDEX mail_messages_unthreaded ON mail_messages(inbox_id, received_at) WHERE thread_guid IS NULL;
CREATE TABLE mail_thread_links (
  inbox_id        TEXT NOT NULL,
  link            TEXT NOT NULL,            -- a Message-ID the message names as a parent
  msg_guid        TEXT NOT NULL,
  PRIMARY KEY (inbox_id, link, msg_guid)
) WITHOUT ROWID;
CREATE INDEX mail_thread_links_message ON mail_thread_links(inbox_id, msg_guid);
CREATE TRIGGER mail_thread_links_delete AFTER DELETE ON mail_messages BEGIN
  DELETE FROM mail_thread_links WHERE inbox_id = old.inbox_id AND msg_guid = old.guid;
END;
`;
