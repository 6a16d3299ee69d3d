-- Threads and previews, as SQLite's migration 031 (docs/threads.md): each message's thread is its
-- founder's GUID, set once (NULL: not placed yet; older rows are placed in the background, oldest
-- first, PgMailIndex.backfillThreads); the ids its References and In-Reply-To name are in
-- mail_thread_links, gone with the message; `preview` is a compatible inbox's text of the body.
ALTER TABLE mail_messages ADD COLUMN thread_guid TEXT;
ALTER TABLE mail_messages ADD COLUMN preview TEXT;
CREATE INDEX mail_messages_thread ON mail_messages (inbox_id, thread_guid);
CREATE INDEX mail_messages_message_id ON mail_messages (inbox_id, message_id) WHERE message_id IS NOT NULL;
CREATE INDEX mail_messages_unthreaded ON mail_messages (inbox_id, received_at) WHERE thread_guid IS NULL;
CREATE TABLE mail_thread_links (
  inbox_id TEXT NOT NULL,
  link TEXT NOT NULL,
  msg_guid TEXT NOT NULL,
  PRIMARY KEY (inbox_id, link, msg_guid),
  FOREIGN KEY (inbox_id, msg_guid) REFERENCES mail_messages (inbox_id, guid) ON DELETE CASCADE
);
CREATE INDEX mail_thread_links_message ON mail_thread_links (inbox_id, msg_guid);
