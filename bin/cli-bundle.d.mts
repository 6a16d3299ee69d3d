// The types of bin/cli-bundle.mjs (plain JavaScript, since it runs before anything is compiled),
// for the TypeScript that builds the bundle ahead: scripts/run-tests.ts, test/helpers/setup.ts, bench/cli.ts.

/** Where the builds and the stamp naming the current one live: dist/cli/. */
export const OUT_DIR: string;
/** The current bundle's entry, or null when there is none or a file it was built from changed. */
export function freshBundle(): string | null;
/** Builds the bundle and makes it current; returns its entry. */
export function buildBundle(): Promise<string>;
/** The current bundle's entry, built first unless it is current. */
export function ensureBundle(): Promise<string>;
