// What a word is to search (lib/mail/search-words.ts) is what SQLite's FTS5 tokenizer makes of the
// same text: the query's words are SQLite's index's words, and PostgreSQL's index is built from
// searchWords, so both engines find the same messages.
import { expect } from 'chai';
import Database from 'better-sqlite3';
import { searchWords } from '../../lib/mail/search-words.ts';

const TEXTS = [
  'Élodie Müller <elodie.mueller@Example.COM>',
  'e\u0301cole', // decomposed accents
  'ΣΟΦΙΑ Straße Ærøskøbing Łódź',
  'हिंदी 日本語のメール Привет',
  'a€b x$y smile😀face under_score dash-ed 1.5% 20,000',
  'ǅungla ﬁne ①② ¹²',
  '"quoted" (paren) [bracket] {brace} it\'s',
  'İstanbul ĲSSEL Ǆ ﬀ ß ẞ Ⅻ ½ Ωmega ΐ ΟΔΟΣ ὈΔΥΣΣΕΎΣ',
  'ſtraße ẛ Ǣsc Ǿre ḍal ǅ \u0130I',
  'ι\u0308\u0301 a\u0305b e\u0301\u0302cole x\u0332y',
];

describe('search words', () => {
  it("are SQLite unicode61's tokens (remove_diacritics 2), text by text", () => {
    const db = new Database(':memory:');
    try {
      db.exec(
        "CREATE VIRTUAL TABLE t USING fts5(x, tokenize = 'unicode61 remove_diacritics 2'); CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance');",
      );
      const latin = Array.from({ length: 0x250 - 0xc0 }, (_, i) => String.fromCodePoint(0xc0 + i)).join(' ');
      const extended = Array.from({ length: 0x100 }, (_, i) => String.fromCodePoint(0x1e00 + i)).join(' ');
      const marks = Array.from({ length: 0x70 }, (_, i) => `a${String.fromCodePoint(0x300 + i)}b`).join(' ');
      for (const text of [...TEXTS, latin, extended, marks]) {
        db.exec('DELETE FROM t');
        db.prepare('INSERT INTO t (rowid, x) VALUES (1, ?)').run(text);
        const tokens = db.prepare('SELECT term FROM v ORDER BY offset').pluck().all() as string[];
        expect(searchWords(text), text).to.deep.equal(tokens);
      }
    } finally {
      db.close();
    }
  });

  it('every address part is a word', () => {
    expect(searchWords('Alice Smith <alice.smith+news@mail.example.com>')).to.deep.equal([
      'alice',
      'smith',
      'alice',
      'smith',
      'news',
      'mail',
      'example',
      'com',
    ]);
  });
});
