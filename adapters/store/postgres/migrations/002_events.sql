-- The project event log on PostgreSQL (docs/events.md): the same tables as SQLite's
-- migrations 002, 004 and 013, with one addition that makes the log never skip: the log's row
-- holds the last position handed out, and an append takes it (a row lock held to COMMIT) as its
-- last step, so position order is commit order (docs/events.md, "On PostgreSQL: a log that never
-- skips"; adapters/store/postgres/events.ts).

CREATE TABLE events (
  position    BIGINT PRIMARY KEY,            -- from event_log.last_position, gap-free, commit order
  event_id    TEXT NOT NULL UNIQUE,
  project_id  TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
  inbox_id    TEXT,
  type        TEXT NOT NULL,
  visibility  TEXT NOT NULL CHECK (visibility IN ('inbox', 'project', 'audit')),
  recorded_at BIGINT NOT NULL,               -- ms; never earlier than the previous row's
  body        TEXT NOT NULL                  -- the CloudEvent JSON, served as is (not jsonb: kept byte for byte)
);
CREATE INDEX events_project ON events (project_id, position);
-- Reads naming inboxes walk this instead of the whole project's log (SQLite's migration 004).
CREATE INDEX events_inbox ON events (inbox_id, position) WHERE inbox_id IS NOT NULL;
-- recorded_at grows with position, so this finds the settle horizon of paged reads at once.
CREATE INDEX events_recorded ON events (recorded_at, position);

-- Append-only: an event is never changed (rows go only with their project).
CREATE FUNCTION events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'events are append-only';
END;
$$;
CREATE TRIGGER events_append_only BEFORE UPDATE ON events
  FOR EACH ROW EXECUTE FUNCTION events_append_only();

-- One counter per stream: the inbox's for inbox events, the project's otherwise.
CREATE TABLE event_streams (
  stream      TEXT PRIMARY KEY,
  seq         BIGINT NOT NULL
);

-- The key is claimed first in the append's transaction (its event id is known before the
-- position); the position of a duplicate's first event is found through events.event_id.
CREATE TABLE event_idempotency (
  project_id  TEXT NOT NULL,
  key         TEXT NOT NULL,
  fingerprint TEXT NOT NULL,                 -- sha256 of the canonical request
  event_id    TEXT NOT NULL,
  created_at  BIGINT NOT NULL,
  PRIMARY KEY (project_id, key)
);
CREATE INDEX event_idempotency_created ON event_idempotency (created_at);

-- One row. id names this log on a shared bus; cursor_secret encrypts cursors (lib/events/cursor.ts).
-- last_position and last_recorded_at are the log's head: every append updates them as its last
-- statement before COMMIT, and the row lock it holds until then is what orders commits.
-- gen_random_uuid() draws from the server's strong random source (122 random bits each; two
-- make the 32-byte secret) and needs no extension.
CREATE TABLE event_log (
  id               TEXT NOT NULL,
  cursor_secret    BYTEA NOT NULL,
  last_position    BIGINT NOT NULL,
  last_recorded_at BIGINT NOT NULL,
  only_row         BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (only_row)
) WITH (fillfactor = 50);                    -- room for HOT updates of the one hot row
INSERT INTO event_log (id, cursor_secret, last_position, last_recorded_at)
VALUES (
  replace(gen_random_uuid()::text, '-', ''),
  uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()),
  0,
  0
);

CREATE TABLE event_types (
  project_id  TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
  name        TEXT NOT NULL,
  version     INTEGER NOT NULL CHECK (version >= 1),
  description TEXT NOT NULL,
  fields      TEXT NOT NULL,                 -- JSON array of data fields, as SQLite stores it
  created_at  BIGINT NOT NULL,
  updated_at  BIGINT NOT NULL,
  PRIMARY KEY (project_id, name, version)
);
