// Passkey sign-in: staff-issued enrollment invites, members' passkeys, and the challenges of
// ceremonies in progress. Sessions remember the passkey that opened them, so removing a passkey
// ends what it opened.
export default `
CREATE TABLE passkey_invites (
  id          TEXT PRIMARY KEY,
  member_id   TEXT NOT NULL REFERENCES members(id),
  secret_hash BLOB NOT NULL,
  created_at  INTEGER NOT NULL,
  expires_at  INTEGER NOT NULL,
  used_at     INTEGER
);
CREATE INDEX passkey_invites_member ON passkey_invites(member_id);

CREATE TABLE passkeys (
  id            TEXT PRIMARY KEY,
  member_id     TEXT NOT NULL REFERENCES members(id),
  credential_id TEXT NOT NULL UNIQUE,     -- base64url, as the authenticator names it
  public_key    BLOB NOT NULL,            -- COSE
  counter       INTEGER NOT NULL,
  transports    TEXT NOT NULL,            -- space-separated
  name          TEXT NOT NULL,
  backed_up     INTEGER NOT NULL,
  created_at    INTEGER NOT NULL,
  last_used_at  INTEGER,
  -- Set when a sign-in showed a signature counter that did not grow: a possible clone.
  disabled_at   INTEGER
);
CREATE INDEX passkeys_member ON passkeys(member_id);

-- A challenge is taken (deleted) by the first response that names it, whatever the outcome.
CREATE TABLE webauthn_challenges (
  challenge   TEXT PRIMARY KEY,
  kind        TEXT NOT NULL CHECK (kind IN ('enroll', 'add', 'sign-in')),
  invite_id   TEXT,
  member_id   TEXT,
  expires_at  INTEGER NOT NULL
);
CREATE INDEX webauthn_challenges_expiry ON webauthn_challenges(expires_at);

ALTER TABLE sessions ADD COLUMN passkey_id TEXT;
CREATE INDEX sessions_member ON sessions(member_id);
CREATE INDEX sessions_passkey ON sessions(passkey_id);
`;
