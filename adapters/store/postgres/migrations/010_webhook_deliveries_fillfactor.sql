-- A delivery's row is written three times: made, leased (a claim), settled. The lease touches no
-- indexed column, so with room left on the row's page it is a HOT update: no new entry in the
-- table's three indexes, and no dead entry in the due index for later claims to walk past. At the
-- default (100) the pages a batch of new deliveries fills have no such room.
ALTER TABLE webhook_deliveries SET (fillfactor = 50);
