// Watching every inbox (docs/watch.md), what it still needed:
// - `inbox_catalog.version` goes up with every inbox added or removed (triggers: in the same
//   transaction, whoever writes). A running `postern serve` polls this one row (cheap) and so
//   learns of a `postern admin inbox add/remove` made by another process within a second, not
//   at its next sweep.
// - `mail_inboxes.removed_at`: the inbox was removed. Its index rows are gone and every later
//   index write for it is refused, so a sync pass still running elsewhere cannot write them back.
// - `mail_labels.fill_low`: a label's first fill runs newest first; every UID from here up to
//   `uid_next` is indexed. NULL: the label is complete. Reads page through what is filled.
// - `mail_inboxes.hinted_at` and `watch_reports`: when a push hint last came for the inbox, and
//   what each running `serve` says of its watch (mode and why, hints taken, hints missed), for
//   `postern admin inbox status`: an operator sees push configured but no hint arriving.
export default `
CREATE TABLE inbox_catalog (
  id        INTEGER PRIMARY KEY CHECK (id = 1),
  version   INTEGER NOT NULL
);
INSERT INTO inbox_catalog (id, version) VALUES (1, 0);
CREATE TRIGGER inbox_catalog_added AFTER INSERT ON inboxes BEGIN
  UPDATE inbox_catalog SET version = version + 1 WHERE id = 1;
END;
CREATE TRIGGER inbox_catalog_removed AFTER DELETE ON inboxes BEGIN
  UPDATE inbox_catalog SET version = version + 1 WHERE id = 1;
END;
ALTER TABLE mail_inboxes ADD COLUMN removed_at INTEGER;
ALTER TABLE mail_labels ADD COLUMN fill_low INTEGER;
ALTER TABLE mail_inboxes ADD COLUMN hinted_at INTEGER;
CREATE TABLE watch_reports (
  origin      TEXT PRIMARY KEY,       -- the serve process
  report      TEXT NOT NULL,          -- JSON: WatchReport
  updated_at  INTEGER NOT NULL        -- ms since the epoch
);
`;
