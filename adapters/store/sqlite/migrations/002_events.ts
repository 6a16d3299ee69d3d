// The project event log (docs/events.md): one append-only table whose position is
// assigned inside the write transaction, per-stream sequence counters, idempotency keys stored
// with their event, and each project's registered event types.
export default `
CREATE TABLE events (
  position    INTEGER PRIMARY KEY AUTOINCREMENT,
  event_id    TEXT NOT NULL UNIQUE,
  project_id  TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
  inbox_id    TEXT,
  type        TEXT NOT NULL,
  visibility  TEXT NOT NULL CHECK (visibility IN ('inbox', 'project', 'audit')),
  recorded_at INTEGER NOT NULL,              -- ms; never earlier than the previous row's
  body        TEXT NOT NULL                  -- the CloudEvent JSON, served as is
);
CREATE INDEX events_project ON events(project_id, position);
-- recorded_at grows with position, so this finds the settle horizon of paged reads at once.
CREATE INDEX events_recorded ON events(recorded_at);

-- Append-only: an event is never changed (rows go only with their project).
CREATE TRIGGER events_append_only BEFORE UPDATE ON events
BEGIN
  SELECT RAISE(ABORT, 'events are append-only');
END;

-- One counter per stream: the inbox's for inbox events, the project's otherwise.
CREATE TABLE event_streams (
  stream      TEXT PRIMARY KEY,
  seq         INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE event_idempotency (
  project_id  TEXT NOT NULL,
  key         TEXT NOT NULL,
  fingerprint TEXT NOT NULL,                 -- sha256 of the canonical request
  event_id    TEXT NOT NULL,
  position    INTEGER NOT NULL,
  created_at  INTEGER NOT NULL,
  PRIMARY KEY (project_id, key)
) WITHOUT ROWID;
CREATE INDEX event_idempotency_created ON event_idempotency(created_at);

-- Names this log on a shared bus: deployments with different stores may share one Redis.
CREATE TABLE event_log (
  id          TEXT NOT NULL
);
INSERT INTO event_log (id) VALUES (lower(hex(randomblob(16))));

CREATE TABLE event_types (
  project_id  TEXT NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
  name        TEXT NOT NULL,
  version     INTEGER NOT NULL CHECK (version >= 1),
  description TEXT NOT NULL,
  fields      TEXT NOT NULL,                 -- JSON array of data fields
  created_at  INTEGER NOT NULL,
  updated_at  INTEGER NOT NULL,
  PRIMARY KEY (project_id, name, version)
) WITHOUT ROWID;
`;
