// The one way the app shows a date (docs/app.md, "Dates"): the time for today, the weekday within
// the last six days, a short date before that (with the year when it is not this year). The full
// date and time is the element's hover title and what a screen reader says.
import { h } from './ui.ts';

const DAY = 24 * 60 * 60 * 1000;

const sameDay = (a: Date, b: Date) => a.getFullYear() === b.getFullYear() && a.getMonth() === b.getMonth() && a.getDate() === b.getDate();

/** The short text shown and the full text said, for `when` seen at `now`; null for a date that does not parse. */
export function dateTexts(when: string | Date, now: Date = new Date()): { short: string; full: string } | null {
  const d = when instanceof Date ? when : new Date(when);
  if (Number.isNaN(d.getTime())) return null;
  const full = d.toLocaleString([], { dateStyle: 'full', timeStyle: 'short' });
  // Days are counted between local midnights, so "yesterday evening" is a weekday, not a time.
  const midnight = (x: Date) => new Date(x.getFullYear(), x.getMonth(), x.getDate()).getTime();
  const daysAgo = Math.round((midnight(now) - midnight(d)) / DAY);
  const short = sameDay(d, now)
    ? d.toLocaleTimeString([], { hour: 'numeric', minute: '2-digit' })
    : daysAgo > 0 && daysAgo < 7
      ? d.toLocaleDateString([], { weekday: 'short' })
      : d.toLocaleDateString([], {
          month: 'short',
          day: 'numeric',
          ...(d.getFullYear() === now.getFullYear() ? {} : { year: 'numeric' }),
        });
  return { short, full };
}

/**
 * A `<time>` showing the short form, the full one on hover and for screen readers (the short text
 * is hidden from them: "Mon" alone says too little). Text that is not a date is shown as it is.
 */
export function timeElement(when: string | Date, attrs: Record<string, string> = {}): HTMLTimeElement {
  const texts = dateTexts(when);
  if (!texts) return h('time', attrs, String(when));
  // A valid datetime attribute whatever the source spelled (a header's date may be RFC 5322).
  const iso = new Date(when).toISOString();
  return h(
    'time',
    { datetime: iso, title: texts.full, ...attrs },
    h('span', { 'aria-hidden': 'true' }, texts.short),
    h('span', { class: 'sr-only' }, texts.full),
  );
}
