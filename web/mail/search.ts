// The search box (on the inbox screen and above the results) and the results screen,
// `#/inbox/<ibx>/search/<query>`: GET /inboxes/{inbox}/search with the box's conditions
// (search-query.ts), rows as the list draws them (list.ts), which open the message screen as the
// list's do; more results a page at a time with the answer's cursor. Results are as of the
// search: searching again (or coming back from a message) reads them again.
import type { InboxList, Label, LabelList, MessageSearchPage } from '../../schemas/wire.ts';
import { api, ApiError } from '../api.ts';
import { addRoute, navigate } from '../routes.ts';
import { labelName } from './labels.ts';
import { button, h, main, show } from '../ui.ts';
import { backFromSearch, listKeys, PAGE_SIZE, row, searchHash, startListing } from './list.ts';
import { parseSearch, SearchSyntaxError, type SearchTerms } from './search-query.ts';

const HINT =
  'Words search subjects. Also from:, to:, cc:, subject:, in:label, is:unread, is:read, is:flagged, is:answered, has:attachment, after:YYYY-MM-DD, before:YYYY-MM-DD, larger:500K, smaller:1M. Message bodies are not searched.';

/** The API's query for `text`, or why it has none (a syntax slip, an unknown label). */
function conditionsOf(text: string, labels: Label[]): URLSearchParams {
  const terms: SearchTerms = parseSearch(text);
  const q = new URLSearchParams(terms.conditions);
  if (terms.label !== undefined) {
    const wanted = terms.label.toLowerCase();
    const label =
      labels.find((l) => l.name.toLowerCase() === wanted || labelName(l).toLowerCase() === wanted) ??
      labels.find((l) => l.id === terms.label);
    if (!label) throw new SearchSyntaxError(`This inbox has no label "${terms.label}".`);
    q.set('inLabel', label.id);
  }
  return q;
}

/**
 * The search box: Enter searches, an empty search or Escape goes back to the list (when on the
 * results; on the list, Escape empties the box). A slip in the syntax is said under the box.
 */
export function searchForm(inboxId: string, labels: Label[], value: string): HTMLFormElement {
  const input = h('input', {
    type: 'search',
    id: 'search',
    name: 'q',
    autocomplete: 'off',
    spellcheck: 'false',
    'aria-describedby': 'search-hint',
    value,
  });
  const problem = h('p', { id: 'search-problem', class: 'error', role: 'alert' });
  const leave = () => navigate(backFromSearch(inboxId));
  const form = h(
    'form',
    { role: 'search', id: 'search-form', 'aria-label': 'Search this inbox' },
    h('label', { for: 'search' }, 'Search this inbox'),
    h('div', { class: 'search-row' }, input, h('button', { type: 'submit', id: 'search-submit' }, 'Search')),
    h('p', { id: 'search-hint', class: 'muted' }, HINT),
    problem,
  );
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const text = input.value.trim();
    problem.textContent = '';
    if (!text) return value ? leave() : undefined;
    try {
      conditionsOf(text, labels);
    } catch (err) {
      if (!(err instanceof SearchSyntaxError)) throw err;
      problem.textContent = err.message;
      return;
    }
    navigate(searchHash(inboxId, text));
  });
  input.addEventListener('keydown', (e) => {
    if (e.key !== 'Escape') return;
    e.preventDefault();
    input.value = '';
    problem.textContent = '';
    if (value) leave();
  });
  return form;
}

async function searchScreen(inboxId: string, text: string): Promise<void> {
  const hash = location.hash;
  const [{ inboxes }, { labels }] = await Promise.all([
    api<InboxList>('GET', '/inboxes'),
    api<LabelList>('GET', `/inboxes/${inboxId}/labels`),
  ]);
  if (location.hash !== hash) return;
  const name = inboxes.find((i) => i.inboxId === inboxId)?.label ?? inboxId;
  const list = h('ul', {
    class: 'list messages',
    id: 'search-results',
    'aria-labelledby': 'results-heading',
    'aria-describedby': 'messages-hint',
  });
  listKeys(list);
  const more = h('div', { class: 'actions' });
  const status = h('p', { id: 'search-status', class: 'muted', role: 'status' }, 'Searching…');
  const heading = h('h2', { id: 'results-heading', tabindex: '-1' }, `Results for “${text}”`);
  show(
    h('p', {}, h('a', { href: backFromSearch(inboxId), id: 'leave-search' }, '← Back to the list')),
    h('h1', {}, name),
    searchForm(inboxId, labels, text),
    heading,
    status,
    h('p', { id: 'messages-hint', class: 'sr-only' }, 'Arrow keys move between messages; Enter opens one.'),
    list,
    more,
  );

  let q: URLSearchParams;
  try {
    q = conditionsOf(text, labels);
  } catch (err) {
    if (!(err instanceof SearchSyntaxError)) throw err;
    status.replaceWith(h('p', { id: 'search-error', class: 'error', role: 'alert' }, err.message));
    return;
  }
  startListing(inboxId, q.get('inLabel') ?? undefined, { hash, name: 'the results' }, false);
  q.set('limit', String(PAGE_SIZE));
  let found = 0;
  const loadPage = async (cursor?: string) => {
    if (cursor) q.set('cursor', cursor);
    let page: MessageSearchPage;
    try {
      page = await api<MessageSearchPage>('GET', `/inboxes/${inboxId}/search?${q}`);
    } catch (err) {
      // The API's own words for a 4xx (a condition it refuses); anything else is the app's report.
      if (!(err instanceof ApiError) || err.status >= 500 || err.status === 401) throw err;
      if (location.hash === hash) status.replaceWith(h('p', { id: 'search-error', class: 'error', role: 'alert' }, err.message));
      return;
    }
    if (location.hash !== hash || !main().contains(list)) return;
    for (const m of page.messages) if (!list.querySelector(`[data-msg="${m.id}"]`)) list.append(row(inboxId, m));
    found = list.childElementCount;
    status.textContent = found === 0 ? 'No messages match.' : `${found} message${found === 1 ? '' : 's'}${page.cursor ? ' so far' : ''}.`;
    status.dataset.found = String(found);
    const next = page.cursor;
    more.replaceChildren(...(next ? [button('More results', () => loadPage(next), { class: 'secondary', id: 'more-results' })] : []));
  };
  await loadPage();
  // Focus was on the page's heading (show); the results are what the member searched for.
  if (location.hash === hash && document.activeElement === main().querySelector('h1')) heading.focus();
}

addRoute(/^#\/inbox\/(ibx_[0-9A-Z]{26})\/search\/(.*)$/, (m) => {
  let text: string;
  try {
    text = decodeURIComponent(m[2]!);
  } catch {
    text = m[2]!;
  }
  return searchScreen(m[1]!, text);
});
