// A webhook delivery names its event by log position (it already had it) instead of carrying a
// copy of the event's JSON: the dispatcher reads the bodies of a batch from the log in one
// statement. A row is then small, and it is written three times (made, leased, settled).
export default `
ALTER TABLE webhook_deliveries DROP COLUMN event;
`;
