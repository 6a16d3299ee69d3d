// Cursors are opaque to clients: a version byte and the log position, base64url. The version
// lets the form change later (a PostgreSQL store may need more than a position) while old
// cursors still parse.
const VERSION = 1;

export function encodeCursor(position: number): string {
  const buf = Buffer.alloc(9);
  buf[0] = VERSION;
  buf.writeBigUInt64BE(BigInt(position), 1);
  return buf.toString('base64url');
}

/** The position a cursor stands for, or null for anything that is not a cursor we issued. */
export function decodeCursor(text: string): number | null {
  if (!/^[A-Za-z0-9_-]{12}$/.test(text)) return null;
  const buf = Buffer.from(text, 'base64url');
  if (buf.length !== 9 || buf[0] !== VERSION) return null;
  const n = buf.readBigUInt64BE(1);
  if (n > BigInt(Number.MAX_SAFE_INTEGER)) return null;
  // Reject non-canonical spellings so one position has one cursor.
  if (encodeCursor(Number(n)) !== text) return null;
  return Number(n);
}
