// What the member's list of sessions shows (docs/app.md, "Sessions and devices"): the device a
// session was opened on, as a short name made from its User-Agent ("Chrome on Linux", never the
// header itself), and when it was last used (written at most once a minute per session).
export default `
ALTER TABLE sessions ADD COLUMN device TEXT;
ALTER TABLE sessions ADD COLUMN last_used_at INTEGER;
`;
