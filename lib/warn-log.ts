// The one thing most parts need from the logger: a warning with its context. pino's Logger is one;
// tests pass a plain object.
export interface WarnLog {
  warn(obj: object, msg: string): void;
}
