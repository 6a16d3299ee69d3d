// ResealClaims on SQLite: a claim is a row; the primary key decides between processes.
import type { ResealClaims } from '../../../lib/mail/reseal.ts';
import type { Db } from './db.ts';

/** Claims older than this are forgotten: the message they name was re-sealed or is long gone. */
const KEEP_MS = 24 * 60 * 60 * 1000;

export class SqliteResealClaims implements ResealClaims {
  private readonly q;

  constructor(db: Db) {
    this.q = {
      claim: db.prepare('INSERT INTO reseal_claims (key, claimed_at) VALUES (?, ?) ON CONFLICT (key) DO NOTHING'),
      release: db.prepare('DELETE FROM reseal_claims WHERE key = ?'),
      prune: db.prepare('DELETE FROM reseal_claims WHERE claimed_at < ?'),
    };
  }

  async claim(key: string): Promise<boolean> {
    const now = Date.now();
    this.q.prune.run(now - KEEP_MS);
    return this.q.claim.run(key, now).changes === 1;
  }

  async release(key: string): Promise<void> {
    this.q.release.run(key);
  }
}
