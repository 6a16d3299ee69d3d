// The per-inbox sending rate, counted per minute. The count of an hour's sends walked every send
// of the window up to the limit (about 70 ns a row: 0.2 ms a send at 3,000 an hour). Now it is
// the sum of at most 60 minutes' counts, plus the sends of the one minute the window starts in,
// walked on mail_outbox_rate: exact, and bounded by a minute's sends rather than the limit.
export default `
CREATE TABLE mail_send_minutes (
  inbox_id  TEXT NOT NULL,
  minute    INTEGER NOT NULL,                -- created_at / 60000, floored
  sends     INTEGER NOT NULL,
  PRIMARY KEY (inbox_id, minute)
) WITHOUT ROWID;
INSERT INTO mail_send_minutes (inbox_id, minute, sends)
  SELECT inbox_id, created_at / 60000, count(*) FROM mail_outbox GROUP BY inbox_id, created_at / 60000;
`;
