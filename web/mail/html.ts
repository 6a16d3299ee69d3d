// HTML mail is untrusted: it is shown in an iframe from `srcdoc` with `sandbox` without
// allow-scripts (nothing in it runs: no script, no javascript: URL, no event handler, no form),
// with a Content-Security-Policy of its own as its first element. That policy lets images come
// only from data: URLs (the message's own cid: parts) until the member asks for remote images;
// every other load (scripts, frames, fonts, stylesheets, fetches) is refused. The srcdoc document
// also inherits the app's own policy (lib/http/routes/web-app.ts), so both apply.
//
// Styles: the inherited `style-src 'self'` refuses the message's inline styles and <style>
// elements, so they are taken out here and applied by the app through CSSOM (constructed style
// sheets, the style attributes as rules of one of them), which CSP does not govern; the frame's
// own policy still refuses any remote url() in them until images are allowed. For that the frame
// has allow-same-origin, so the app can reach its document (and measure it: fitToContent). NEVER
// add allow-scripts beside it: the HTML standard's warning is that the two together let the
// content remove its own sandbox.
import type { Attachment } from 'postal-mime';

const REMOTE = /^\s*(?:https?:)?\/\//i;

export interface PreparedHtml {
  /** The srcdoc text. */
  srcdoc: string;
  /** How many references to remote images (img src/srcset, background, CSS url()) it has. */
  remoteImages: number;
  /** The message's styles, for applyStyles(): style attributes by `data-postern-style` index, and <style> texts. */
  styles: { inline: string[]; sheets: string[] };
}

/** The Content-ID without its angle brackets, lower-cased, as `cid:` URLs name it (RFC 2392). */
const cidOf = (contentId: string) => contentId.replace(/^<|>$/g, '').trim().toLowerCase();

/** A cid: URL's percent-encoding undone; a malformed one (the sender's text) is taken as written, not thrown. */
function decodeCid(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

/** Link schemes a message may use; anything else (javascript:, data:, blob:, file:, …) loses its href. */
const SAFE_LINK = /^\s*(?:https?|mailto):/i;

function dataUrl(part: Attachment): string {
  const bytes = typeof part.content === 'string' ? new TextEncoder().encode(part.content) : new Uint8Array(part.content);
  let binary = '';
  for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return `data:${part.mimeType};base64,${btoa(binary)}`;
}

export function frameCsp(remoteImages: boolean): string {
  return [
    "default-src 'none'",
    `img-src data:${remoteImages ? ' http: https:' : ''}`,
    "style-src 'unsafe-inline'",
    'font-src data:',
    "form-action 'none'",
    "base-uri 'none'",
  ].join('; ');
}

/**
 * Even a DOMParser document reports the app's CSP refusing the message's style attributes and
 * <style> elements (harmless, but noise in the console and in the tests' CSP watch). So before
 * parsing they are renamed to names CSP ignores, with a random marker, and every other place the
 * rename touched (text, other attribute values) is put back after parsing. A spelling the rename
 * misses only costs that style (refused, reported), never safety.
 */
function hideStyles(html: string): { html: string; marker: string } {
  const marker = `x-${Array.from(crypto.getRandomValues(new Uint8Array(6)), (b) => b.toString(16).padStart(2, '0')).join('')}`;
  const out = html.replace(/<(\/?)style\b/gi, `<$1${marker}-style`).replace(/([\s"'/])style(\s*=)/gi, `$1${marker}-style$2`);
  return { html: out, marker };
}

function takeStyles(doc: Document, marker: string): PreparedHtml['styles'] {
  const styles: PreparedHtml['styles'] = { inline: [], sheets: [] };
  const name = `${marker}-style`;
  // Where the rename reached text or another attribute's value, the original words come back.
  const restore = (text: string) => text.split(name).join('style');
  for (const el of Array.from(doc.querySelectorAll('*'))) {
    if (el.localName === name) {
      styles.sheets.push(el.textContent ?? '');
      el.remove();
      continue;
    }
    for (const attr of Array.from(el.attributes)) {
      if (attr.name === name) {
        el.removeAttribute(attr.name);
        el.setAttribute('data-postern-style', String(styles.inline.push(attr.value) - 1));
      } else if (attr.value.includes(marker)) el.setAttribute(attr.name, restore(attr.value));
    }
  }
  const walker = doc.createTreeWalker(doc, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode())
    if (node.nodeValue?.includes(marker)) node.nodeValue = restore(node.nodeValue);
  return styles;
}

/**
 * The message's HTML made ready for the sandboxed frame. Parsed with DOMParser, which runs no
 * script and loads nothing; `cid:` images become data: URLs of the message's own parts (so the
 * frame's policy allows data: images only); what could navigate or refresh the frame is removed.
 */
export function prepareHtml(html: string, parts: Attachment[], showRemote: boolean): PreparedHtml {
  const marks = hideStyles(html);
  const doc = new DOMParser().parseFromString(marks.html, 'text/html');
  const styles = takeStyles(doc, marks.marker);
  const byCid = new Map<string, Attachment>();
  for (const p of parts) if (p.contentId) byCid.set(cidOf(p.contentId), p);
  const urls = new Map<string, string>();
  let remoteImages = 0;

  // <template> too: its content is out of querySelectorAll's reach here, and the frame's parser
  // would attach a declarative shadow root (<template shadowrootmode>) from it, unsanitised.
  for (const el of Array.from(
    doc.querySelectorAll('script, iframe, frame, frameset, object, embed, applet, base, link, meta, form, template'),
  )) {
    // Forms cannot submit in the sandbox, but keep their fields visible.
    if (el.localName === 'form') el.replaceWith(...Array.from(el.childNodes));
    else el.remove();
  }
  // The frame's policy is no-referrer; an element's own referrerpolicy would override it and tell
  // the sender where Postern runs.
  for (const el of Array.from(doc.querySelectorAll('[referrerpolicy]'))) el.removeAttribute('referrerpolicy');
  for (const img of Array.from(doc.querySelectorAll('img, input[type=image]'))) {
    const src = img.getAttribute('src') ?? '';
    if (/^cid:/i.test(src)) {
      const id = cidOf(decodeCid(src.slice(4)));
      const part = byCid.get(id);
      if (part) {
        let url = urls.get(id);
        if (!url) urls.set(id, (url = dataUrl(part)));
        img.setAttribute('src', url);
      } else img.removeAttribute('src');
    } else if (REMOTE.test(src)) remoteImages++;
  }
  // A <picture>'s dark-mode source would not suit the frame's light surface either.
  for (const el of Array.from(doc.querySelectorAll('source[media]'))) el.setAttribute('media', lightScheme(el.getAttribute('media')!));
  for (const el of Array.from(doc.querySelectorAll('img[srcset], source[srcset]')))
    if (/(?:https?:)?\/\//i.test(el.getAttribute('srcset')!)) remoteImages++;
  for (const el of Array.from(doc.querySelectorAll('[background]'))) if (REMOTE.test(el.getAttribute('background')!)) remoteImages++;
  for (const css of [...styles.inline, ...styles.sheets]) remoteImages += (css.match(/url\(\s*['"]?\s*(?:https?:)?\/\//gi) ?? []).length;

  const head = doc.head;
  const csp = doc.createElement('meta');
  csp.setAttribute('http-equiv', 'Content-Security-Policy');
  csp.setAttribute('content', frameCsp(showRemote));
  const referrer = doc.createElement('meta');
  referrer.setAttribute('name', 'referrer');
  referrer.setAttribute('content', 'no-referrer');
  // Links open outside the frame, in a new tab with no opener, never in the frame itself.
  const base = doc.createElement('base');
  base.setAttribute('target', '_blank');
  head.prepend(csp, referrer, base);
  for (const a of Array.from(doc.querySelectorAll('a[href], area[href]'))) {
    // The sandbox and the app's CSP already refuse script URLs; this keeps them from relying on it.
    // Relative links would open the app's own origin, which a message has no business linking to.
    if (!SAFE_LINK.test(a.getAttribute('href')!)) a.removeAttribute('href');
    // The message's own target (_top, _parent, a named frame) would be the sandbox's to refuse.
    a.setAttribute('target', '_blank');
    // Hyperlink auditing: a click would also POST to the sender's URL (CSP refuses it; no need to ask).
    a.removeAttribute('ping');
    a.setAttribute('rel', 'noopener noreferrer');
  }
  return { srcdoc: `<!doctype html>${doc.documentElement.outerHTML}`, remoteImages, styles };
}

/**
 * The message's style attributes as one sheet of rules, `[data-postern-style="3"] { … !important }`.
 * Not `el.style.cssText`: Chromium fetches the url()s of styles set that way with an origin
 * Referer, whatever the documents' referrer policies say, so once images are shown the sender
 * would learn where Postern runs; a constructed sheet's fetches follow the policy (no Referer).
 * `!important` keeps what an inline style does: beat the message's ordinary rules.
 */
function inlineSheet(doc: Document, inline: string[]): string {
  // A detached element parses the declarations and fetches nothing.
  const probe = doc.createElement('div');
  let text = '';
  inline.forEach((css, i) => {
    probe.style.cssText = css;
    const decls = Array.from(probe.style, (name) => `${name}: ${probe.style.getPropertyValue(name)} !important;`).join(' ');
    if (decls) text += `[data-postern-style="${i}"] { ${decls} }\n`;
  });
  return text;
}

/**
 * The frame's own first sheet, before the message's (which may override its colours, not its
 * scheme: form controls stay light): a light surface whatever the app's scheme (docs/app.md,
 * "Accessibility, dark mode and HTML mail"), and no vertical scrollbar of its own, since
 * fitToContent() makes the frame as tall as its content. Wide content still scrolls sideways.
 */
const SURFACE = ':root { color-scheme: light !important; background: #fff; color: #000; overflow-y: hidden; }';

/**
 * The frame's `prefers-color-scheme` follows the system's, not its light surface, so a message's
 * own dark-mode rules would apply on it (white text on white). Its queries are answered as on a
 * light screen instead, by features every screen answers the same way (`grid` is 0 on a bitmap
 * screen), so `not` and `and` still read right.
 */
export const lightScheme = (css: string): string =>
  css.replace(/prefers-color-scheme\s*:\s*(dark|light)\b/gi, (_, scheme: string) =>
    scheme.toLowerCase() === 'dark' ? 'grid: 1' : 'grid: 0',
  );

/** Applies the message's styles to the frame's document once it has loaded (see the top of this file). */
export function applyStyles(frame: HTMLIFrameElement, styles: PreparedHtml['styles']): void {
  const doc = frame.contentDocument;
  const view = doc?.defaultView;
  if (!doc || !view) return;
  const sheets: CSSStyleSheet[] = [];
  // Inline styles last: of equal weight, the later sheet wins.
  for (const text of [SURFACE, ...styles.sheets.map(lightScheme), inlineSheet(doc, styles.inline)]) {
    // A constructed sheet ignores @import: nothing is fetched for it.
    const sheet = new view.CSSStyleSheet();
    try {
      sheet.replaceSync(text);
    } catch {
      continue;
    }
    sheets.push(sheet);
  }
  doc.adoptedStyleSheets = sheets;
}

/** The highest a frame is made, whatever its content says. */
const MAX_HEIGHT = 30_000;
const watching = new WeakMap<HTMLIFrameElement, ResizeObserver>();

/**
 * Makes the frame as tall as its loaded document's content, and keeps it so as the content's
 * size changes (images arriving, the width changing). The app measures the frame's document
 * from outside, which allow-same-origin already lets it do for the styles (nothing runs in the
 * frame); the height is set through the CSSOM, which the CSP allows. Sets `data-sized` once
 * measured. Called on each load: a new document replaces the old one's observer.
 */
export function fitToContent(frame: HTMLIFrameElement): void {
  watching.get(frame)?.disconnect();
  const doc = frame.contentDocument;
  const root = doc?.documentElement;
  const view = doc?.defaultView;
  if (!doc || !root || !view) return;
  // The frame's own border counts too: its height is the border box's (style.css).
  const setHeight = (inner: number) => {
    const height = `${Math.min(MAX_HEIGHT, inner + frame.offsetHeight - frame.clientHeight)}px`;
    if (frame.style.height !== height) frame.style.height = height;
  };
  // The content's own height (it shrinks when the content does), or more when something overflows
  // it (a message whose html is `height: 100%`); plus a sideways scrollbar's height. Reading it
  // lays the frame out again if its size changed.
  const needed = () => {
    const content = Math.ceil(root.getBoundingClientRect().height);
    const overflow = root.scrollHeight > root.clientHeight ? root.scrollHeight : 0;
    return Math.max(content, overflow) + Math.max(0, view.innerHeight - root.clientHeight);
  };
  // Content sized by its frame (`min-height: 100vh`) would outgrow every height given to it; a
  // frame 100 px taller is tried, and if the content grows with it the frame gets most of the
  // app's window (a page designed for one screen gets one) and no more.
  const followsFrame = (inner: number, height: number) => {
    const was = frame.style.height;
    setHeight(inner + 100);
    const grew = needed() - height >= 99;
    frame.style.height = was;
    return grew;
  };
  const measure = () => {
    const inner = view.innerHeight;
    const height = needed();
    if (height <= inner || !followsFrame(inner, height)) setHeight(height);
    else setHeight(Math.max(inner, Math.round(window.innerHeight * 0.7)));
    frame.dataset.sized = 'true';
  };
  const observer = new ResizeObserver(measure);
  observer.observe(root);
  if (doc.body) observer.observe(doc.body);
  watching.set(frame, observer);
  measure();
}
