// The web app's search box language (web/mail/search-query.ts) → the search API's conditions.
import { expect } from 'chai';
import { parseSearch, SearchSyntaxError } from '../../web/mail/search-query.ts';

describe('web app search box syntax', () => {
  const local = (y: number, m: number, d: number) => new Date(y, m - 1, d).toISOString();

  it('plain words search the subject; prefixes their header; quotes group', () => {
    expect(parseSearch('invoice march')).to.deep.equal({ conditions: { subject: 'invoice march' } });
    expect(parseSearch('from:ada@example.org to:"Bob Smith" cc:zoe subject:lunch friday')).to.deep.equal({
      conditions: { from: 'ada@example.org', to: 'Bob Smith', cc: 'zoe', subject: 'lunch friday' },
    });
    expect(parseSearch('FROM:ada from:lovelace').conditions).to.deep.equal({ from: 'ada lovelace' });
    // A prefix with nothing after it is a word ("Re:"), not a condition.
    expect(parseSearch('Re: lunch').conditions).to.deep.equal({ subject: 'Re: lunch' });
    expect(parseSearch('   ')).to.deep.equal({ conditions: {} });
  });

  it('is:, has:, in:, dates and sizes', () => {
    expect(parseSearch('is:unread is:flagged has:attachment in:"Sent Items"')).to.deep.equal({
      conditions: { notKeyword: 'seen', hasKeyword: 'flagged', hasAttachment: 'true' },
      label: 'Sent Items',
    });
    expect(parseSearch('is:read').conditions).to.deep.equal({ hasKeyword: 'seen' });
    expect(parseSearch('after:2024-01-31 before:2024-03-01').conditions).to.deep.equal({
      after: local(2024, 1, 31),
      before: local(2024, 3, 1),
    });
    expect(parseSearch('larger:500K smaller:2M').conditions).to.deep.equal({
      minSize: String(500 * 1024),
      maxSize: String(2 * 1024 * 1024),
    });
    expect(parseSearch('larger:1200').conditions).to.deep.equal({ minSize: '1200' });
  });

  it('says what it cannot search', () => {
    for (const [text, said] of [
      ['form:ada', /Unknown search term "form:"/],
      ['body:kumquat', /Unknown search term "body:"/],
      ['is:spam', /is: takes unread, read/],
      ['has:pdf', /has: takes attachment/],
      ['after:31/01/2024', /after: takes a date as YYYY-MM-DD/],
      ['before:2024-02-30', /before: takes a date/],
      ['larger:big', /larger: takes a size/],
      ['is:read is:flagged', /Only one of is:read, is:flagged/],
      ['in:INBOX in:Archive', /Only one in:/],
    ] as const)
      expect(() => parseSearch(text), text).to.throw(SearchSyntaxError, said);
    // The same condition twice is not a conflict.
    expect(parseSearch('is:unread is:unread').conditions).to.deep.equal({ notKeyword: 'seen' });
  });
});
