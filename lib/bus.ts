// The port for fan-out between the parts of one process and, with Redis, between processes.
// Messages are strings (already-serialized JSON) so one serialization serves every receiver.

export type Unsubscribe = () => Promise<void>;

export interface Bus {
  /** False for the in-process bus: publishing then reaches no one a local delivery has not. */
  readonly spansProcesses: boolean;
  publish(channel: string, message: string): Promise<void>;
  /** Delivery is at most once; receivers heal gaps from the store. */
  subscribe(channel: string, handler: (message: string) => void): Promise<Unsubscribe>;
  close(): Promise<void>;
}
