// The interactive API reference at /docs: public, self-contained (every file it loads comes from
// Postern), and under a Content-Security-Policy that allows no inline script and no other origin.
import { expect } from 'chai';
import { startPostern, type TestServer } from '../helpers/harness.ts';

/** directive -> its sources. */
function parseCsp(header: string | null): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const part of (header ?? '').split(';')) {
    const [name, ...sources] = part.trim().split(/\s+/);
    if (name) out[name.toLowerCase()] = sources;
  }
  return out;
}

/** Every src= and href= in the page. */
function references(html: string): string[] {
  return [...html.matchAll(/\b(?:src|href)\s*=\s*["']([^"']*)["']/gi)].map((m) => m[1]!);
}

describe('API reference (/docs)', () => {
  let s: TestServer;
  let html: string;
  let page: Response;

  before(async () => {
    s = await startPostern();
    page = await fetch(`${s.url}/docs`);
    html = await page.text();
  });
  after(() => s.close());

  it('is served without credentials, under a CSP allowing only Postern itself and no inline script', () => {
    expect(page.status, html).to.equal(200);
    expect(page.headers.get('content-type')).to.match(/^text\/html/);
    const csp = parseCsp(page.headers.get('content-security-policy'));
    expect(csp['default-src']).to.deep.equal(["'none'"]);
    expect(csp['script-src']).to.deep.equal(["'self'"]);
    for (const [directive, sources] of Object.entries(csp)) {
      for (const source of sources) {
        expect(source, directive).to.not.match(/unsafe|^\*|^https?:|^blob:|^'nonce-|^'sha/);
        if (directive !== 'img-src') expect(source, directive).to.not.equal('data:');
      }
    }
  });

  it('has no inline script, style or event handler, and names no other origin', () => {
    const scripts = [...html.matchAll(/<script\b([^>]*)>([\s\S]*?)<\/script>/gi)];
    expect(scripts, 'the page loads Swagger UI and its init script').to.have.length.greaterThan(1);
    for (const [tag, attributes, body] of scripts) {
      expect(attributes, tag).to.match(/\bsrc\s*=/);
      expect(body!.trim(), tag).to.equal('');
    }
    expect(html).to.not.match(/<style\b|\sstyle\s*=|\son[a-z]+\s*=/i);
    expect(html, 'no absolute or protocol-relative URL').to.not.match(/\/\/|\b[a-z][a-z0-9+.-]*:[^\s"'<>]*\//i);
  });

  it('every file the page loads is served by Postern, and the init script renders the served OpenAPI document', async () => {
    const refs = references(html);
    expect(refs).to.have.length.greaterThan(2);
    const types: Record<string, RegExp> = { js: /^text\/javascript/, css: /^text\/css/, png: /^image\/png/ };
    let init = '';
    for (const ref of refs) {
      expect(ref, 'a path on Postern itself').to.match(/^\/[^/]/);
      const res = await fetch(`${s.url}${ref}`);
      expect(res.status, ref).to.equal(200);
      const ext = ref.slice(ref.lastIndexOf('.') + 1);
      expect(res.headers.get('content-type'), ref).to.match(types[ext] ?? /^$/);
      if (ext === 'png') continue;
      const text = await res.text();
      // A source map the browser would fetch from elsewhere (or a 404) is stripped.
      expect(text, ref).to.not.include('sourceMappingURL');
      if (ext === 'css') {
        for (const [, url] of text.matchAll(/url\(\s*["']?([^"')]*)/g)) expect(url, `${ref}: url(${url})`).to.match(/^(data:|\/[^/])/);
      }
      if (ref.endsWith('/init.js')) init = text;
    }
    const spec = /url:\s*'([^']+)'/.exec(init)?.[1];
    expect(spec, 'the init script names the document it renders').to.be.a('string');
    const doc = await fetch(`${s.url}${spec}`);
    expect(doc.status).to.equal(200);
    expect(((await doc.json()) as { openapi: string }).openapi).to.equal('3.1.0');
  });

  it('serves only its own files', async () => {
    for (const path of ['/docs/assets/swagger-ui-bundle.js.map', '/docs/assets/../../package.json', '/docs/assets/index.html']) {
      expect((await fetch(`${s.url}${path}`)).status, path).to.equal(404);
    }
  });
});
