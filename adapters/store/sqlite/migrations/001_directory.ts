// Projects, members, inboxes and the credentials members act through.
export default `
CREATE TABLE projects (
  id          TEXT PRIMARY KEY,
  name        TEXT NOT NULL,
  created_at  INTEGER NOT NULL
);

CREATE TABLE members (
  id          TEXT PRIMARY KEY,
  project_id  TEXT NOT NULL REFERENCES projects(id),
  email       TEXT NOT NULL,
  created_at  INTEGER NOT NULL,
  UNIQUE (project_id, email)
);

CREATE TABLE inboxes (
  id          TEXT PRIMARY KEY,
  project_id  TEXT NOT NULL REFERENCES projects(id),
  imap_user   TEXT NOT NULL UNIQUE,
  mode        TEXT NOT NULL CHECK (mode IN ('compatible', 'zero-access')),
  created_at  INTEGER NOT NULL
);
CREATE INDEX inboxes_project ON inboxes(project_id);

-- An address routes to exactly one inbox, so it is unique across all projects.
CREATE TABLE inbox_addresses (
  address     TEXT PRIMARY KEY,
  inbox_id    TEXT NOT NULL REFERENCES inboxes(id),
  position    INTEGER NOT NULL
);
CREATE INDEX inbox_addresses_inbox ON inbox_addresses(inbox_id, position);

CREATE TABLE grants (
  member_id   TEXT NOT NULL REFERENCES members(id),
  inbox_id    TEXT NOT NULL REFERENCES inboxes(id),
  role        TEXT NOT NULL,
  created_at  INTEGER NOT NULL,
  PRIMARY KEY (member_id, inbox_id)
);

CREATE TABLE tokens (
  id          TEXT PRIMARY KEY,
  project_id  TEXT NOT NULL REFERENCES projects(id),
  member_id   TEXT NOT NULL REFERENCES members(id),
  scopes      TEXT NOT NULL,            -- space-separated
  secret_hash BLOB NOT NULL,
  created_at  INTEGER NOT NULL,
  expires_at  INTEGER,
  revoked_at  INTEGER
);
CREATE INDEX tokens_member ON tokens(member_id);

-- A token narrowed to some inboxes has one row per inbox; an unnarrowed token has none.
CREATE TABLE token_inboxes (
  token_id    TEXT NOT NULL REFERENCES tokens(id),
  inbox_id    TEXT NOT NULL REFERENCES inboxes(id),
  PRIMARY KEY (token_id, inbox_id)
);

CREATE TABLE sessions (
  id          TEXT PRIMARY KEY,
  member_id   TEXT NOT NULL REFERENCES members(id),
  secret_hash BLOB NOT NULL,
  created_at  INTEGER NOT NULL,
  expires_at  INTEGER NOT NULL,
  revoked_at  INTEGER
);
`;
