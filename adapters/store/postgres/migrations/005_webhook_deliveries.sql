-- Webhook deliveries (docs/webhooks.md, lib/webhooks/dispatcher.ts): SQLite's migration 026 in
-- PostgreSQL's types. One row per event per endpoint, made when the dispatcher reads past the
-- endpoint's position and kept until purged after it settles; a process works on a row under a
-- lease (lease_owner, lease_until). `event` is the event's JSON as GET /events serves it.
ALTER TABLE webhook_endpoints ADD COLUMN failing_since BIGINT;
CREATE TABLE webhook_deliveries (
  endpoint_id      TEXT NOT NULL,
  event_id         TEXT NOT NULL,
  position         BIGINT NOT NULL,
  project_id       TEXT NOT NULL,
  type             TEXT NOT NULL,
  event            TEXT NOT NULL,
  state            TEXT NOT NULL DEFAULT 'pending',   -- pending | delivered | failed
  attempts         INTEGER NOT NULL DEFAULT 0,
  next_attempt_at  BIGINT NOT NULL,
  lease_owner      TEXT,
  lease_until      BIGINT,
  last_attempt_at  BIGINT,
  last_status      INTEGER,
  last_error       TEXT,
  last_ms          INTEGER,
  created_at       BIGINT NOT NULL,
  updated_at       BIGINT NOT NULL,
  PRIMARY KEY (endpoint_id, event_id)
);
-- An endpoint's due deliveries (claims), and its deliveries by event (the deliveries list).
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (endpoint_id, next_attempt_at, position) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, position);
CREATE INDEX webhook_deliveries_settled ON webhook_deliveries (updated_at) WHERE state <> 'pending';
