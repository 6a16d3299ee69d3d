// The shapes every route shares: what middleware leaves in ctx.state, and the router type.
import type Router from '@koa/router';
import type { RouterContext } from '@koa/router';
import type { Principal } from '../auth/access.ts';

/** Which base address the request came in on: tokens on {base_url}, sessions on {app_url}. */
export type Surface = 'token' | 'session';

export interface AppState {
  surface: Surface;
  /** Set by the authentication middleware before any route handler runs. */
  principal: Principal;
  requestId: string;
  /** How long a body being read may send nothing (POSTERN_BODY_IDLE_TIMEOUT_MS); set before any route runs. */
  bodyIdleMs: number;
}

export type AppRouter = Router<AppState>;
export type AppContext = RouterContext<AppState>;
