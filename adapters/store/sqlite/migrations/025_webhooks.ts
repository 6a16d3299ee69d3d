// Webhook endpoints (docs/webhooks.md, lib/webhooks/ports.ts): where a project's events are sent. The
// signing secrets are sealed with the service master key; `position` is how far in the event log
// the endpoint has been served (the log's head when it was made).
export default `
CREATE TABLE webhook_endpoints (
  id                     TEXT PRIMARY KEY,
  project_id             TEXT NOT NULL,
  token_id               TEXT NOT NULL,
  url                    TEXT NOT NULL,
  types                  TEXT,               -- JSON list of names and prefix.* patterns; NULL: all
  inboxes                TEXT,               -- JSON list of inbox ids; NULL: all the token may use
  description            TEXT,
  secret_sealed          BLOB NOT NULL,
  previous_secret_sealed BLOB,
  previous_expires_at    INTEGER,
  disabled_at            INTEGER,
  disabled_reason        TEXT,
  position               INTEGER NOT NULL,
  created_at             INTEGER NOT NULL,
  updated_at             INTEGER NOT NULL
);
CREATE INDEX webhook_endpoints_project ON webhook_endpoints(project_id, id);
`;
