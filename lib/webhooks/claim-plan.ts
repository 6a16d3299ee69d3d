// Which endpoints a claim asks deliveries for, and how many each (docs/webhooks.md): a batch
// each, for endpoints down to half a batch, within what their project may hold, in turn.

export interface ClaimPlanInput {
  /** The enabled endpoints (id and project), in a stable order. */
  endpoints: ReadonlyArray<readonly [string, { projectId: string }]>;
  /** Where this claim starts among them (claims made so far). */
  turn: number;
  /** Endpoints whose last claim came back short: skipped until the next poll. */
  drained: { has(id: string): boolean };
  /** Deliveries the process holds for the endpoint (under way and waiting). */
  held: (id: string) => number;
  /** How many the endpoint's batch holds (lib/webhooks/pace.ts). */
  batchOf: (id: string) => number;
  /** How many more each project holding deliveries may hold (InFlight.projectRooms in lib/webhooks/in-flight.ts). */
  projectRooms: ReadonlyMap<string, number>;
  /** What a project not in projectRooms may hold (it holds none). */
  emptyProjectRoom: number;
}

export interface ClaimPlan {
  endpoints: Array<{ id: string; limit: number }>;
  /** Some endpoint was left out for want of room in its project: the next attempt's end claims again. */
  projectFull: boolean;
}

export function planClaim(i: ClaimPlanInput): ClaimPlan {
  // A batch each: the next ones wait here, ready to start the moment an attempt ends. Only
  // endpoints down to half a batch: topping up by the few attempts that ended during the last
  // claim cost a flush and a claim for a handful of rows.
  // Each project's endpoints share what it may hold (projectRoom), in turn: each claim starts one
  // endpoint further on, so the first ones cannot keep a busy project's room.
  const endpoints: Array<{ id: string; limit: number }> = [];
  // Each project's room, counted once for the pass (counting it walks every queue).
  const room = new Map(i.projectRooms);
  let projectFull = false;
  const all = i.endpoints;
  const from = all.length > 0 ? i.turn % all.length : 0;
  for (const [id, e] of [...all.slice(from), ...all.slice(0, from)]) {
    if (i.drained.has(id) || i.held(id) > i.batchOf(id) / 2) continue;
    const left = room.get(e.projectId) ?? i.emptyProjectRoom;
    const limit = Math.min(i.batchOf(id) - i.held(id), left);
    if (limit <= 0) {
      projectFull = true;
      continue;
    }
    room.set(e.projectId, left - limit);
    endpoints.push({ id, limit });
  }
  return { endpoints, projectFull };
}
