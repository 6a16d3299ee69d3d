// A member's OpenPGP private key, encrypted in the browser under keys the server never sees.
// The server stores and returns it as it came; `version` lets two devices not overwrite each other.
export default `
CREATE TABLE member_key_blobs (
  member_id   TEXT PRIMARY KEY REFERENCES members(id),
  blob        TEXT NOT NULL,
  version     INTEGER NOT NULL,
  updated_at  INTEGER NOT NULL
);
`;
