// Listeners grouped by a key (a bus channel, a project, an inbox): add one, get a function that
// removes it, and the key goes when its last listener does. The same function added twice is two
// listeners, each removed on its own.
export class Listeners<T> {
  private readonly byKey = new Map<string, Set<(value: T) => void>>();

  /** @param onEmpty runs when a key loses its last listener. */
  constructor(private readonly onEmpty: (key: string) => void = () => undefined) {}

  add(key: string, listener: (value: T) => void): () => void {
    let set = this.byKey.get(key);
    if (!set) this.byKey.set(key, (set = new Set()));
    const entry = (value: T) => listener(value);
    set.add(entry);
    return () => {
      set.delete(entry);
      if (set.size === 0 && this.byKey.get(key) === set) {
        this.byKey.delete(key);
        this.onEmpty(key);
      }
    };
  }

  /** Calls each listener of `key`; one that throws does not keep the value from the others. */
  emit(key: string, value: T, onError: (err: unknown) => void = () => undefined): void {
    const set = this.byKey.get(key);
    if (!set) return;
    for (const listener of set) {
      try {
        listener(value);
      } catch (err) {
        onError(err);
      }
    }
  }

  /** Calls every listener of every key. */
  emitAll(value: T, onError: (err: unknown) => void = () => undefined): void {
    for (const key of [...this.byKey.keys()]) this.emit(key, value, onError);
  }

  has(key: string): boolean {
    return this.byKey.has(key);
  }

  /** Keys with listeners. */
  get size(): number {
    return this.byKey.size;
  }

  count(): number {
    let n = 0;
    for (const set of this.byKey.values()) n += set.size;
    return n;
  }

  clear(): void {
    this.byKey.clear();
  }
}
