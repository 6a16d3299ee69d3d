-- A delivery is keyed by its endpoint and its event's log position, which names the event as
-- uniquely as its id (events.position and events.event_id are both unique), and the key's index
-- then serves the deliveries list as webhook_deliveries_endpoint did: each new row adds one index
-- entry fewer, a share of the database's work per delivery. SQLite keeps its key.
ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_pkey;
DROP INDEX webhook_deliveries_endpoint;
ALTER TABLE webhook_deliveries ADD PRIMARY KEY (endpoint_id, position);
