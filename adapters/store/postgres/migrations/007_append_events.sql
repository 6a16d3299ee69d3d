-- A batch of appends in one statement (docs/events.md, "On PostgreSQL: a log that never skips"): BEGIN, the key claims, the stream counters, the
-- log's head, the INSERT and COMMIT were six round trips per batch, and on a shared machine those
-- round trips (not the head's lock) were what limited POST /events. The steps and their lock
-- order are unchanged (adapters/store/postgres/events.ts): idempotency keys, then stream
-- counters, then the log's head row as the last lock taken, held to COMMIT, so position order is
-- still commit order and the log never skips (docs/events.md).
--
-- Arguments are parallel arrays, one element per append, in the order positions are given. A
-- NULL key: an append without one. Each body comes in three pieces, around the recorded time
-- (ISO 8601, as JavaScript's toISOString writes it) and the stream's zero-padded sequence, which
-- are known only here; p_time_first says which of the two comes first.
--
-- One row per append (r_index, from 1):
--   'appended'  its position, recorded time and sequence;
--   'duplicate' a live key already claimed by a committed event: that event's id and position,
--               and the fingerprint it was stored with;
--   'retry'     its key's event was not found (purged or expired since the claim was refused):
--               the caller appends it again.
CREATE FUNCTION append_events(
  p_project text[], p_event_id text[], p_inbox text[], p_type text[], p_visibility text[], p_stream text[],
  p_now bigint[], p_key text[], p_fingerprint text[], p_cutoff bigint[],
  p_head text[], p_middle text[], p_tail text[], p_time_first boolean[]
) RETURNS TABLE (r_index integer, r_kind text, r_event_id text, r_position bigint, r_recorded_at bigint, r_seq bigint, r_fingerprint text)
LANGUAGE plpgsql AS $$
DECLARE
  won text[] := '{}';
  streams text[];
  counts bigint[];
  seqs bigint[];
  n integer;
  last_pos bigint;
  recorded bigint;
BEGIN
  -- Keys, sorted: each claimed, or taken over if expired (its own cutoff); a key another
  -- transaction is claiming is waited for.
  WITH claimed AS (
    INSERT INTO event_idempotency AS k (project_id, key, fingerprint, event_id, created_at)
      SELECT u.p, u.k, u.f, u.e, u.c FROM unnest(p_project, p_key, p_fingerprint, p_event_id, p_now) AS u(p, k, f, e, c)
      WHERE u.k IS NOT NULL ORDER BY u.p, u.k
    ON CONFLICT (project_id, key) DO UPDATE
      SET fingerprint = excluded.fingerprint, event_id = excluded.event_id, created_at = excluded.created_at
      WHERE k.created_at <= (
        SELECT v.cut FROM unnest(p_project, p_key, p_cutoff) AS v(p, k, cut) WHERE v.p = excluded.project_id AND v.k = excluded.key LIMIT 1)
    RETURNING k.event_id)
  SELECT coalesce(array_agg(claimed.event_id), '{}') INTO won FROM claimed;

  -- Keys refused: a live key's event, committed before the claim was refused (this statement
  -- reads a snapshot taken after it).
  RETURN QUERY
    SELECT u.i::integer,
           CASE WHEN e.position IS NULL THEN 'retry' ELSE 'duplicate' END,
           ik.event_id, e.position, NULL::bigint, NULL::bigint, ik.fingerprint
    FROM unnest(p_project, p_key, p_event_id) WITH ORDINALITY AS u(p, k, e, i)
    LEFT JOIN event_idempotency ik ON ik.project_id = u.p AND ik.key = u.k
    LEFT JOIN events e ON e.event_id = ik.event_id
    WHERE u.k IS NOT NULL AND NOT (u.e = ANY (won));

  SELECT count(*)::integer INTO n FROM unnest(p_key, p_event_id) AS u(k, e) WHERE u.k IS NULL OR u.e = ANY (won);
  IF n = 0 THEN
    RETURN;
  END IF;

  -- Stream counters, sorted: each moved by its number of appends here.
  SELECT array_agg(s ORDER BY s), array_agg(c ORDER BY s) INTO streams, counts
  FROM (SELECT u.s, count(*) AS c FROM unnest(p_stream, p_key, p_event_id) AS u(s, k, e)
        WHERE u.k IS NULL OR u.e = ANY (won) GROUP BY u.s) g;
  WITH bumped AS (
    INSERT INTO event_streams AS es (stream, seq) SELECT b.s, b.c FROM unnest(streams, counts) AS b(s, c) ORDER BY b.s
    ON CONFLICT (stream) DO UPDATE SET seq = es.seq + excluded.seq
    RETURNING es.stream, es.seq)
  SELECT array_agg(bumped.seq ORDER BY bumped.stream) INTO seqs FROM bumped;

  -- The log's head, the last lock taken: held to COMMIT. The batch is recorded at one time,
  -- never earlier than the log's last.
  UPDATE event_log SET last_position = last_position + n,
    last_recorded_at = GREATEST(last_recorded_at, (SELECT max(u.c) FROM unnest(p_now, p_key, p_event_id) AS u(c, k, e) WHERE u.k IS NULL OR u.e = ANY (won)))
  RETURNING last_position, last_recorded_at INTO last_pos, recorded;

  RETURN QUERY
    WITH w AS (
      SELECT u.*, row_number() OVER (ORDER BY u.i) AS rank, row_number() OVER (PARTITION BY u.s ORDER BY u.i) AS nth
      FROM unnest(p_project, p_event_id, p_inbox, p_type, p_visibility, p_stream, p_key, p_head, p_middle, p_tail, p_time_first)
        WITH ORDINALITY AS u(p, e, ib, ty, vis, s, k, h, m, t, tf, i)
      WHERE u.k IS NULL OR u.e = ANY (won)
    ), numbered AS (
      SELECT w.*, last_pos - n + w.rank AS pos, st.seq - st.c + w.nth AS sq
      FROM w JOIN unnest(streams, counts, seqs) AS st(s, c, seq) ON st.s = w.s
    ), texts AS (
      SELECT numbered.*, lpad(sq::text, 20, '0') AS seq_text,
        to_char(timestamp 'epoch' + recorded * interval '1 millisecond', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS time_text
      FROM numbered
    ), inserted AS (
      INSERT INTO events (position, event_id, project_id, inbox_id, type, visibility, recorded_at, body)
        SELECT pos, e, p, ib, ty, vis, recorded,
          CASE WHEN tf THEN h || time_text || m || seq_text || t ELSE h || seq_text || m || time_text || t END
        FROM texts ORDER BY pos
    )
    SELECT numbered.i::integer, 'appended', numbered.e, numbered.pos, recorded, numbered.sq, NULL::text FROM numbered;
END;
$$;
