// The one error type. Anything thrown as an ApiError reaches the client as { error: message }
// with its status; anything else is a bug and becomes a logged 500.

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly headers: Readonly<Record<string, string>> = {},
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

export const badRequest = (message: string) => new ApiError(400, message);
export const unauthorized = (message = 'missing or invalid credential') =>
  new ApiError(401, message, { 'WWW-Authenticate': 'Bearer' });
export const forbidden = (message: string) => new ApiError(403, message);
export const notFound = (message = 'not found') => new ApiError(404, message);
export const conflict = (message: string) => new ApiError(409, message);
export const tooLarge = (message: string) => new ApiError(413, message);
export const unprocessable = (message: string) => new ApiError(422, message);
export const tooManyRequests = (message: string, retryAfterSeconds: number) =>
  new ApiError(429, message, { 'Retry-After': String(retryAfterSeconds) });
export const unavailable = (message: string, retryAfterSeconds = 5) =>
  new ApiError(503, message, { 'Retry-After': String(retryAfterSeconds) });

export function isApiError(err: unknown): err is ApiError {
  return err instanceof ApiError;
}
