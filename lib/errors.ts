// The domain's one error type: what went wrong, in the domain's words (a kind), and the message
// the caller reads. The domain and the adapters throw these; lib/http/errors.ts alone turns a
// kind into an HTTP status. Anything thrown that is not a DomainError is a bug (a logged 500).

export type ErrorKind =
  /** The request is malformed: a field missing, a value out of range. */
  | 'invalid'
  /** No credential, or one that is wrong, expired or revoked. */
  | 'unauthenticated'
  /** A valid credential that may not do this. */
  | 'forbidden'
  | 'not-found'
  /** It existed and never will again (a used invite). */
  | 'gone'
  /** The state of things refuses it (a duplicate, a reused key with other content). */
  | 'conflict'
  | 'too-large'
  /** Well-formed, but refused for what it says (a bad event type, a sent draft). */
  | 'unprocessable'
  /** Too many, too fast: try again after `retryAfterSeconds`. */
  | 'rate-limited'
  /** A dependency (the mail server, the store) cannot answer now: try again after `retryAfterSeconds`. */
  | 'unavailable';

// The class's mark, shared by every copy of this module: under the tests' loader a module imported
// dynamically (adapters/store/open.ts loads the PostgreSQL store so) gets a copy of its own, whose
// errors instanceof would not know.
const DOMAIN_ERROR = Symbol.for('postern.DomainError');

export class DomainError extends Error {
  constructor(
    readonly kind: ErrorKind,
    message: string,
    /** When trying again may succeed (rate-limited, unavailable). */
    readonly retryAfterSeconds?: number,
  ) {
    super(message);
    this.name = 'DomainError';
    Object.defineProperty(this, DOMAIN_ERROR, { value: true });
  }
}

export const invalid = (message: string) => new DomainError('invalid', message);
export const unauthenticated = (message = 'missing or invalid credential') => new DomainError('unauthenticated', message);
export const forbidden = (message: string) => new DomainError('forbidden', message);
export const notFound = (message = 'not found') => new DomainError('not-found', message);
export const gone = (message: string) => new DomainError('gone', message);
export const conflict = (message: string) => new DomainError('conflict', message);
export const tooLarge = (message: string) => new DomainError('too-large', message);
export const unprocessable = (message: string) => new DomainError('unprocessable', message);
export const rateLimited = (message: string, retryAfterSeconds: number) => new DomainError('rate-limited', message, retryAfterSeconds);
export const unavailable = (message: string, retryAfterSeconds = 5) => new DomainError('unavailable', message, retryAfterSeconds);

export function isDomainError(err: unknown): err is DomainError {
  return err instanceof DomainError || (err instanceof Error && (err as Error & { [DOMAIN_ERROR]?: true })[DOMAIN_ERROR] === true);
}
