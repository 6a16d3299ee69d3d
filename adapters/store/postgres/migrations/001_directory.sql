-- Projects, members, inboxes, the credentials members act through (tokens, sessions, passkeys
-- and their challenges), and the encryption keys: the SQLite schema after its migrations 001,
-- 008, 009, 010, 016, 017 and 024, in PostgreSQL's types. Names are SQLite's, so each adapter's
-- statements translate one for one. Times are milliseconds since the epoch (BIGINT).

CREATE TABLE projects (
  id          TEXT PRIMARY KEY,
  name        TEXT NOT NULL,
  created_at  BIGINT NOT NULL
);

-- The domain lower-cases emails before they get here.
CREATE TABLE members (
  id          TEXT PRIMARY KEY,
  project_id  TEXT NOT NULL REFERENCES projects(id),
  email       TEXT NOT NULL,
  created_at  BIGINT NOT NULL,
  UNIQUE (project_id, email)
);

CREATE TABLE inboxes (
  id          TEXT PRIMARY KEY,
  project_id  TEXT NOT NULL REFERENCES projects(id),
  imap_user   TEXT NOT NULL,
  mode        TEXT NOT NULL CHECK (mode IN ('compatible', 'zero-access')),
  created_at  BIGINT NOT NULL
);
-- IMAP users are looked up whatever their case (SQLite: COLLATE NOCASE); unique the same way,
-- so two staff racing to add "Bob" and "bob" get one inbox. The cluster's C locale folds ASCII
-- only, as SQLite does.
CREATE UNIQUE INDEX inboxes_imap_user_lower ON inboxes (lower(imap_user));
CREATE INDEX inboxes_project ON inboxes (project_id);

-- An address routes to exactly one inbox, so it is unique across all projects. The ingress finds
-- an inbox by the address mail arrives for, whatever its case.
CREATE TABLE inbox_addresses (
  address     TEXT PRIMARY KEY,
  inbox_id    TEXT NOT NULL REFERENCES inboxes(id),
  position    INTEGER NOT NULL
);
CREATE INDEX inbox_addresses_inbox ON inbox_addresses (inbox_id, position);
CREATE UNIQUE INDEX inbox_addresses_lower ON inbox_addresses (lower(address));

CREATE TABLE grants (
  member_id   TEXT NOT NULL REFERENCES members(id),
  inbox_id    TEXT NOT NULL REFERENCES inboxes(id),
  role        TEXT NOT NULL,
  created_at  BIGINT NOT NULL,
  PRIMARY KEY (member_id, inbox_id)
);
-- Removing an inbox deletes its grants and token narrowings by inbox, and PostgreSQL checks the
-- foreign keys of both on that delete: neither primary key leads with inbox_id.
CREATE INDEX grants_inbox ON grants (inbox_id);

CREATE TABLE tokens (
  id          TEXT PRIMARY KEY,
  project_id  TEXT NOT NULL REFERENCES projects(id),
  member_id   TEXT NOT NULL REFERENCES members(id),
  scopes      TEXT NOT NULL,            -- space-separated
  secret_hash BYTEA NOT NULL,
  created_at  BIGINT NOT NULL,
  expires_at  BIGINT,
  revoked_at  BIGINT
);
CREATE INDEX tokens_member ON tokens (member_id);

-- A token narrowed to some inboxes has one row per inbox; an unnarrowed token has none.
CREATE TABLE token_inboxes (
  token_id    TEXT NOT NULL REFERENCES tokens(id),
  inbox_id    TEXT NOT NULL REFERENCES inboxes(id),
  PRIMARY KEY (token_id, inbox_id)
);
CREATE INDEX token_inboxes_inbox ON token_inboxes (inbox_id);

-- Sessions remember the passkey that opened them, so removing a passkey ends what it opened.
CREATE TABLE sessions (
  id          TEXT PRIMARY KEY,
  member_id   TEXT NOT NULL REFERENCES members(id),
  secret_hash BYTEA NOT NULL,
  created_at  BIGINT NOT NULL,
  expires_at  BIGINT NOT NULL,
  revoked_at  BIGINT,
  passkey_id  TEXT
);
CREATE INDEX sessions_member ON sessions (member_id);
CREATE INDEX sessions_passkey ON sessions (passkey_id);

CREATE TABLE passkey_invites (
  id          TEXT PRIMARY KEY,
  member_id   TEXT NOT NULL REFERENCES members(id),
  secret_hash BYTEA NOT NULL,
  created_at  BIGINT NOT NULL,
  expires_at  BIGINT NOT NULL,
  used_at     BIGINT
);
CREATE INDEX passkey_invites_member ON passkey_invites (member_id);

CREATE TABLE passkeys (
  id            TEXT PRIMARY KEY,
  member_id     TEXT NOT NULL REFERENCES members(id),
  credential_id TEXT NOT NULL UNIQUE,     -- base64url, as the authenticator names it
  public_key    BYTEA NOT NULL,           -- COSE
  counter       BIGINT NOT NULL,          -- the authenticator's 32-bit unsigned signature counter
  transports    TEXT NOT NULL,            -- space-separated
  name          TEXT NOT NULL,
  backed_up     BOOLEAN NOT NULL,
  created_at    BIGINT NOT NULL,
  last_used_at  BIGINT,
  -- Set when a sign-in showed a signature counter that did not grow: a possible clone.
  disabled_at   BIGINT
);
CREATE INDEX passkeys_member ON passkeys (member_id);

-- A challenge is taken (deleted) by the first response that names it, whatever the outcome. A
-- re-authentication challenge names the one operation it was issued for.
CREATE TABLE webauthn_challenges (
  challenge   TEXT PRIMARY KEY,
  kind        TEXT NOT NULL CHECK (kind IN ('enroll', 'add', 'sign-in', 'reauth')),
  invite_id   TEXT,
  member_id   TEXT,
  operation   TEXT CHECK (operation IN ('replace-key', 'add-passkey')),
  expires_at  BIGINT NOT NULL,
  CHECK ((kind = 'reauth') = (operation IS NOT NULL))
);
CREATE INDEX webauthn_challenges_expiry ON webauthn_challenges (expires_at);

-- Each inbox's epoch keys: the private key sealed under the service master key (never stored).
CREATE TABLE epoch_keys (
  inbox_id        TEXT NOT NULL REFERENCES inboxes(id),
  epoch           INTEGER NOT NULL CHECK (epoch >= 1),
  public_key      BYTEA NOT NULL,           -- binary OpenPGP public key
  fingerprint     TEXT NOT NULL,
  sealed_private  BYTEA NOT NULL,           -- MasterKey.seal of the binary private key
  created_at      BIGINT NOT NULL,
  PRIMARY KEY (inbox_id, epoch)
);

CREATE TABLE member_keys (
  member_id       TEXT PRIMARY KEY REFERENCES members(id),
  public_key      BYTEA NOT NULL,           -- binary OpenPGP public key
  fingerprint     TEXT NOT NULL,
  updated_at      BIGINT NOT NULL
);

-- A member's OpenPGP private key, encrypted in the browser under keys the server never sees:
-- stored and returned as it came; `version` lets two devices not overwrite each other.
CREATE TABLE member_key_blobs (
  member_id   TEXT PRIMARY KEY REFERENCES members(id),
  blob        TEXT NOT NULL,
  version     INTEGER NOT NULL,
  updated_at  BIGINT NOT NULL
);

-- Per message, its session key sealed to an epoch key (the detail's `wrappedDek`). Keyed by
-- Dovecot's GUID: the same in every label.
CREATE TABLE message_keys (
  inbox_id        TEXT NOT NULL REFERENCES inboxes(id),
  msg_guid        TEXT NOT NULL,
  epoch           INTEGER NOT NULL,
  wrapped_dek     BYTEA NOT NULL,           -- binary PKESK packet(s)
  created_at      BIGINT NOT NULL,
  PRIMARY KEY (inbox_id, msg_guid)
);
