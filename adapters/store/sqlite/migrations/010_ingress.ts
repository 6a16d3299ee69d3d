// The delivery ingress and re-sealing (lib/mail/ingress.ts, lib/mail/resealing.ts).
export default `
-- The ingress finds an inbox by the address mail arrives for, whatever its case (the local part
-- is case-sensitive by rule, but no mail server treats it so).
CREATE INDEX inbox_addresses_lower ON inbox_addresses(lower(address));

-- One row per message a process took on re-sealing: the first INSERT wins across processes.
-- key = inbox, label GUID, UIDVALIDITY, UID: names that message for good.
CREATE TABLE reseal_claims (
  key         TEXT PRIMARY KEY,
  claimed_at  INTEGER NOT NULL
);
CREATE INDEX reseal_claims_age ON reseal_claims(claimed_at);
`;
