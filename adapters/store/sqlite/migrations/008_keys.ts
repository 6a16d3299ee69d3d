// Encryption keys (docs/encryption.md, "Keys"): each inbox's epoch keys (the private key sealed under the
// service master key, which is never stored) and each member's OpenPGP public key. Inboxes made
// before this migration get epoch 1 at the next start (EpochKeyring.prepare: SQL cannot make keys).
export default `
CREATE TABLE epoch_keys (
  inbox_id        TEXT NOT NULL REFERENCES inboxes(id),
  epoch           INTEGER NOT NULL CHECK (epoch >= 1),
  public_key      BLOB NOT NULL,            -- binary OpenPGP public key
  fingerprint     TEXT NOT NULL,
  sealed_private  BLOB NOT NULL,            -- MasterKey.seal of the binary private key
  created_at      INTEGER NOT NULL,
  PRIMARY KEY (inbox_id, epoch)
) WITHOUT ROWID;

CREATE TABLE member_keys (
  member_id       TEXT PRIMARY KEY REFERENCES members(id),
  public_key      BLOB NOT NULL,            -- binary OpenPGP public key
  fingerprint     TEXT NOT NULL,
  updated_at      INTEGER NOT NULL
) WITHOUT ROWID;
`;
