// The configuration templates in docker/ (shared with the Docker image), rendered for one env.
import * as fs from 'node:fs/promises';
import * as path from 'node:path';
import { writeAtomic } from './files.ts';
import { findRepoRoot } from './layout.ts';

export type TemplateVars = Record<string, string | number>;

function render(template: string, vars: TemplateVars, source: string): string {
  return template.replace(/\{\{([A-Z0-9_]+)\}\}/g, (_m, key: string) => {
    const v = vars[key];
    if (v === undefined) throw new Error(`mailenv: ${source} uses {{${key}}}, which has no value`);
    return String(v);
  });
}

/** Renders docker/<name> to dest; returns whether dest changed. */
export async function renderTemplate(name: string, dest: string, vars: TemplateVars): Promise<boolean> {
  const src = path.join(findRepoRoot(), 'docker', name);
  return writeAtomic(dest, render(await fs.readFile(src, 'utf8'), vars, src), 0o644);
}
