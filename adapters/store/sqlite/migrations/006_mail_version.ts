// The per-inbox index version lives in the store, bumped in the same transaction as each index
// write, so derived results cached by any process see every other process's writes.
export default `
ALTER TABLE mail_inboxes ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
`;
