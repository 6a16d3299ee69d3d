// The secret event cursors are encrypted under, one key per project derived from it
// (lib/events/cursor.ts). Kept with the log so every process sharing the store reads the same
// cursors; random per store, so another deployment's cursors mean nothing here.
export default `
ALTER TABLE event_log ADD COLUMN cursor_secret BLOB;
UPDATE event_log SET cursor_secret = randomblob(32);
`;
