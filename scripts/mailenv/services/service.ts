// What the environment knows about each of its services. Adding a service is one file in this
// folder implementing Service, and one entry in index.ts; a new port is a row in ../ports.ts.
import type { Account } from '../accounts.ts';
import type { Layout } from '../layout.ts';
import type { PackageNeed } from '../packages.ts';
import type { Probe } from '../probes.ts';

/** Shared by every service while the environment is prepared. */
export interface PrepareContext {
  vmail: Account;
}

export interface Service<N extends string = string> {
  name: N;
  /** Debian packages it runs from. */
  packages: readonly PackageNeed[];
  /** Creates its directories under the env dir. */
  prepare(l: Layout, ctx: PrepareContext): Promise<void>;
  /** Renders its configuration; returns whether it changed. */
  configure?(l: Layout, ctx: PrepareContext): Promise<boolean>;
  /** Makes a running instance pick up a changed configuration. */
  reload?(l: Layout): Promise<void>;
  /** Its ports, each with how to tell it is ready. */
  probes(l: Layout): Probe[];
  /** Its log, shown when it does not come up. */
  log(l: Layout): string;
  pidFile(l: Layout): string;
  /** Whether a live pid (read from its pid file) is really this env's instance: pids are reused. */
  isOurs(l: Layout, pid: number): boolean;
  /** Starts it (returns once it is forked, not when ready). */
  start(l: Layout): Promise<void>;
  /** Asks it to shut down (its processes are then awaited, and killed when late). Default SIGTERM. */
  stop?(l: Layout, pid: number): Promise<void>;
  /** Cleans up after it is gone (or found not running). */
  afterStop?(l: Layout): Promise<void>;
}
