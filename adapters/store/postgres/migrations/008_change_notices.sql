-- Notices of changes that processes keep reads of (adapters/store/postgres/changes.ts): sent by
-- PostgreSQL at COMMIT to every listening connection, so a token revoked through one machine, or
-- by `postern admin`, is dropped by every other at once. The payload names what changed; notices
-- with the same payload in one transaction are sent once.

-- A token's row changed (revoked, deleted with its member or project) or lost an inbox it was
-- narrowed to, or gained one (a token is written before its narrowing).
CREATE FUNCTION notify_token_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  -- Each branch names only its own table's columns: PL/pgSQL resolves a field when it runs it.
  IF TG_TABLE_NAME = 'tokens' THEN
    PERFORM pg_notify('postern_tokens', OLD.id);
  ELSIF TG_OP = 'INSERT' THEN
    PERFORM pg_notify('postern_tokens', NEW.token_id);
  ELSE
    PERFORM pg_notify('postern_tokens', OLD.token_id);
  END IF;
  RETURN NULL;
END;
$$;
CREATE TRIGGER tokens_changed AFTER UPDATE OR DELETE ON tokens
  FOR EACH ROW EXECUTE FUNCTION notify_token_changed();
CREATE TRIGGER token_inboxes_changed AFTER INSERT OR UPDATE OR DELETE ON token_inboxes
  FOR EACH ROW EXECUTE FUNCTION notify_token_changed();

-- A project's event types changed: a version registered, updated, or deleted with its project.
CREATE FUNCTION notify_event_types_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    PERFORM pg_notify('postern_event_types', OLD.project_id);
  ELSE
    PERFORM pg_notify('postern_event_types', NEW.project_id);
  END IF;
  RETURN NULL;
END;
$$;
CREATE TRIGGER event_types_changed AFTER INSERT OR UPDATE OR DELETE ON event_types
  FOR EACH ROW EXECUTE FUNCTION notify_event_types_changed();
