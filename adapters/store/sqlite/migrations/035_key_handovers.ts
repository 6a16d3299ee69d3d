// Approving a new device from a signed-in one (docs/app.md, "A new device"): the new device's
// ephemeral public key, then the approving device's and the member key sealed to the new one.
// Nothing here opens the key: the server relays ciphertext. A row lives minutes (expires_at).
export default `
CREATE TABLE key_handovers (
  id                 TEXT PRIMARY KEY,
  member_id          TEXT NOT NULL REFERENCES members(id),
  requester_session  TEXT NOT NULL,
  device             TEXT,
  requester_key      TEXT NOT NULL,
  approver_key       TEXT,
  sealed             TEXT,
  created_at         INTEGER NOT NULL,
  expires_at         INTEGER NOT NULL,
  CHECK ((approver_key IS NULL) = (sealed IS NULL))
);
CREATE INDEX key_handovers_member ON key_handovers(member_id);
CREATE INDEX key_handovers_expiry ON key_handovers(expires_at);
`;
