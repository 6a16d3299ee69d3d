-- More reads each process keeps (adapters/store/postgres/changes.ts), announced like tokens in
-- 008: every request on an inbox asks for the caller's grant, the inbox and whether its index is
-- seeded, a round trip each otherwise. The payload names what changed.

-- An inbox was deleted (with its project), or its addresses changed.
CREATE FUNCTION notify_inbox_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_TABLE_NAME = 'inboxes' THEN
    PERFORM pg_notify('postern_inboxes', OLD.id);
  ELSIF TG_OP = 'INSERT' THEN
    PERFORM pg_notify('postern_inboxes', NEW.inbox_id);
  ELSE
    PERFORM pg_notify('postern_inboxes', OLD.inbox_id);
  END IF;
  RETURN NULL;
END;
$$;
CREATE TRIGGER inboxes_changed AFTER UPDATE OR DELETE ON inboxes
  FOR EACH ROW EXECUTE FUNCTION notify_inbox_changed();
CREATE TRIGGER inbox_addresses_changed AFTER INSERT OR UPDATE OR DELETE ON inbox_addresses
  FOR EACH ROW EXECUTE FUNCTION notify_inbox_changed();

-- A member's grant on an inbox changed role or went (the payload is "member inbox").
CREATE FUNCTION notify_grant_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    PERFORM pg_notify('postern_grants', NEW.member_id || ' ' || NEW.inbox_id);
  ELSE
    PERFORM pg_notify('postern_grants', OLD.member_id || ' ' || OLD.inbox_id);
  END IF;
  RETURN NULL;
END;
$$;
CREATE TRIGGER grants_changed AFTER INSERT OR UPDATE OR DELETE ON grants
  FOR EACH ROW EXECUTE FUNCTION notify_grant_changed();

-- An inbox's index stopped being seeded (the inbox was removed or its index reset). Only that
-- change: the row's version moves with every index write, and no reader keeps it.
CREATE FUNCTION notify_index_unseeded() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('postern_index_seeded', OLD.inbox_id);
  RETURN NULL;
END;
$$;
CREATE TRIGGER mail_inboxes_unseeded AFTER UPDATE OF seeded ON mail_inboxes
  FOR EACH ROW WHEN (OLD.seeded AND NOT NEW.seeded) EXECUTE FUNCTION notify_index_unseeded();
CREATE TRIGGER mail_inboxes_deleted AFTER DELETE ON mail_inboxes
  FOR EACH ROW EXECUTE FUNCTION notify_index_unseeded();
