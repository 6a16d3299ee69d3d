// When each inbox's index last caught up with the mail server (a sync pass that worked): shown
// by `postern admin inbox status`, so an operator sees an inbox the watch has lost (docs/watch.md).
export default `
ALTER TABLE mail_inboxes ADD COLUMN synced_at INTEGER;  -- ms since the epoch; NULL: never
`;
