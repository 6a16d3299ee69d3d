// axe-core in the app's pages (docs/app.md, "Accessibility, dark mode and HTML mail"): read from
// node_modules, never fetched, and run through page.evaluate, which the app's CSP does not govern
// (an added script tag would be inline, and script-src 'self' refuses it).
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { Page } from 'playwright-core';
import { inPage } from './browser.ts';

const AXE_SOURCE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
/** WCAG 2.0, 2.1 and 2.2, levels A and AA, as axe tags its rules. */
const WCAG_AA = ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'wcag22aa'];

interface AxeViolation {
  id: string;
  help: string;
  nodes: Array<{ target: string[]; failureSummary?: string }>;
}

export interface AxeAudit {
  /** Viewport widths to audit at (the page's height becomes 800 px); none: the page as it is. */
  widths?: number[];
  /** The width to leave the page at afterwards, when `widths` changed it. */
  restoreWidth?: number;
  /** Called after each audit, light and dark, at each width: for screenshots. */
  after?: (width: number | undefined, colorScheme: 'light' | 'dark') => Promise<void>;
}

/**
 * axe's WCAG 2.2 AA violations on the page as it is, in light and dark, at each width asked for:
 * each described for a failure message. The message's own HTML (a sandboxed frame without
 * scripts, the sender's content) is not the app's to answer for: iframes: false.
 */
export async function axeViolations(page: Page, screen: string, audit: AxeAudit = {}): Promise<string[]> {
  if (!(await inPage<boolean>(page, 'typeof window.axe === "object"'))) await page.evaluate(`${AXE_SOURCE}\n;undefined`);
  const found: string[] = [];
  for (const width of audit.widths ?? [undefined])
    for (const colorScheme of ['light', 'dark'] as const) {
      if (width !== undefined) await page.setViewportSize({ width, height: 800 });
      await page.emulateMedia({ colorScheme });
      const violations = await inPage<AxeViolation[]>(
        page,
        `axe.run(document, { runOnly: { type: 'tag', values: ${JSON.stringify(WCAG_AA)} }, iframes: false, resultTypes: ['violations'] }).then((r) => r.violations.map((v) => ({ id: v.id, help: v.help, nodes: v.nodes.map((n) => ({ target: n.target, failureSummary: n.failureSummary })) })))`,
      );
      for (const v of violations)
        found.push(
          `${screen} (${width === undefined ? '' : `${width}px, `}${colorScheme}): ${v.id} — ${v.help}\n${v.nodes.map((n) => `    ${n.target.join(' ')}: ${n.failureSummary ?? ''}`).join('\n')}`,
        );
      await audit.after?.(width, colorScheme);
    }
  if (audit.restoreWidth !== undefined) await page.setViewportSize({ width: audit.restoreWidth, height: 800 });
  await page.emulateMedia({ colorScheme: 'light' });
  return found;
}
