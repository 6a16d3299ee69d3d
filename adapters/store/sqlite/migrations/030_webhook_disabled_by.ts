// Who disabled a webhook endpoint: its owner, the dispatcher (failures, 410, a revoked token) or
// staff. An endpoint staff disabled is not enabled again by its owner (docs/webhooks.md); rows
// disabled before this column are read from the reason each of those writers gave.
export default `
ALTER TABLE webhook_endpoints ADD COLUMN disabled_by TEXT;
UPDATE webhook_endpoints SET disabled_by = CASE
    WHEN disabled_reason LIKE 'disabled by staff:%' THEN 'staff'
    WHEN disabled_reason = 'disabled through the API' THEN 'owner'
    ELSE 'dispatcher' END
  WHERE disabled_at IS NOT NULL;
`;
