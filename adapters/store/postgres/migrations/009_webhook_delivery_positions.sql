-- SQLite's migration 028: a webhook delivery names its event by log position instead of carrying
-- a copy of its JSON; the dispatcher reads a batch's bodies from the log.
ALTER TABLE webhook_deliveries DROP COLUMN event;
