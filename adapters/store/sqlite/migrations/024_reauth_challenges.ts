// Re-authentication: a session that replaces the member's key or adds a passkey first answers a
// challenge issued for that one operation (docs/app.md). The challenge table gains the ceremony
// kind 'reauth' and the operation it was issued for; SQLite cannot widen a CHECK in place, and
// what the table holds are minutes-old challenges, so it is made anew (a ceremony in progress
// during the upgrade asks for new options).
export default `
DROP TABLE webauthn_challenges;
CREATE TABLE webauthn_challenges (
  challenge   TEXT PRIMARY KEY,
  kind        TEXT NOT NULL CHECK (kind IN ('enroll', 'add', 'sign-in', 'reauth')),
  invite_id   TEXT,
  member_id   TEXT,
  operation   TEXT CHECK (operation IN ('replace-key', 'add-passkey')),
  expires_at  INTEGER NOT NULL,
  CHECK ((kind = 'reauth') = (operation IS NOT NULL))
);
CREATE INDEX webauthn_challenges_expiry ON webauthn_challenges(expires_at);
`;
