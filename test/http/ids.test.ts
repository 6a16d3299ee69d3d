// The one id codec (lib/ids.ts): 16 bytes ↔ 26 Crockford base32 characters, canonical only.
import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import { decode128, encode128, newId, parseId, randomId } from '../../lib/ids.ts';

describe('ids: the codec', () => {
  it('encodes known values, and decodes them back', () => {
    const cases: Array<[string, string]> = [
      ['00000000000000000000000000000000', '00000000000000000000000000'],
      ['ffffffffffffffffffffffffffffffff', '7ZZZZZZZZZZZZZZZZZZZZZZZZZ'],
      ['00000000000000000000000000000001', '00000000000000000000000001'],
      ['80000000000000000000000000000000', '40000000000000000000000000'],
      ['0123456789abcdef0123456789abcdef', '014D2PF2DBSQQG28T5CY4TQKFF'],
    ];
    for (const [hex, text] of cases) {
      expect(encode128(Buffer.from(hex, 'hex'))).to.equal(text);
      expect(decode128(text)?.toString('hex')).to.equal(hex);
    }
  });

  it('round-trips random values', () => {
    for (let i = 0; i < 2000; i++) {
      const bytes = randomBytes(16);
      expect(decode128(encode128(bytes))?.equals(bytes)).to.equal(true);
    }
  });

  it('refuses what is not a canonical encoding', () => {
    for (const bad of [
      '80000000000000000000000000',
      'ZZZZZZZZZZZZZZZZZZZZZZZZZZ',
      '0000000000000000000000000I',
      '0000000000000000000000000',
      '000000000000000000000000000',
      '0000000000000000000000000a',
    ]) {
      expect(decode128(bad), bad).to.equal(null);
    }
    expect(parseId('msg', 'lbl_00000000000000000000000000')).to.equal(null);
  });

  it('mints ids in time order, distinct within a millisecond', () => {
    const ids = Array.from({ length: 1000 }, () => newId('evt', 1_700_000_000_000));
    expect([...ids].sort()).to.deep.equal(ids);
    expect(new Set(ids).size).to.equal(1000);
    expect(new Set(Array.from({ length: 1000 }, () => randomId(16).toString('hex'))).size).to.equal(1000);
  });
});
