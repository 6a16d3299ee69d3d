// The README's settings table and staff CLI list are what scripts/readme-tables.ts generates from
// the SETTINGS table (lib/config.ts) and `postern help` (bin/postern.ts): a setting or command
// added, changed or removed without `npm run readme` fails here. Needs no mail environment.
import { readFileSync } from 'node:fs';
import { expect } from 'chai';
import { SETTINGS } from '../../lib/config.ts';
import { README, renderReadme as render, SECTIONS, settingsTable } from '../../scripts/readme-tables.ts';

// `postern help` runs as a child process that loads the whole program: once for the file.
const rendered = new Map<string, string>();
const sections = SECTIONS.map((s) => ({
  name: s.name,
  render: () => rendered.get(s.name) ?? rendered.set(s.name, s.render()).get(s.name)!,
}));
const renderReadme = (readme: string) => render(readme, sections);

describe('README: generated tables', function () {
  this.timeout(60_000);

  it('holds the settings table and the CLI list as npm run readme writes them', () => {
    const current = readFileSync(README, 'utf8');
    expect(renderReadme(current) === current, 'README.md is out of date: run npm run readme').to.equal(true);
  });

  it('lists every setting once, with its default, and the CLI usage text as printed', () => {
    const table = settingsTable();
    for (const s of SETTINGS) {
      expect(
        table.split('\n').filter((row) => row.startsWith(`| \`${s.name}\` |`)),
        s.name,
      ).to.have.length(1);
    }
    expect(table).to.include('| `POSTERN_PORT` | `8787` |');
    expect(table).to.include('| `POSTERN_IMAP_MASTER_PASSWORD` | required |');
    const usage = sections.find((s) => s.name.startsWith('cli'))!.render();
    expect(usage).to.match(/^```text\nusage:\n {2}postern serve /);
    expect(usage).to.include('postern admin token create --member MEM');
  });

  it('tells a stale README apart, and one without its markers', () => {
    const current = readFileSync(README, 'utf8');
    const stale = current.replace('| `POSTERN_PORT` | `8787` |', '| `POSTERN_PORT` | `8080` |');
    expect(stale).to.not.equal(current);
    expect(renderReadme(stale)).to.equal(current);
    const dropped = current.replace(/\n\| `POSTERN_LOG_LEVEL` \|[^\n]*/, '');
    expect(dropped).to.not.equal(current);
    expect(renderReadme(dropped)).to.equal(current);
    expect(() => renderReadme('# A README without markers\n')).to.throw(/no generated section "settings/);
  });
});
