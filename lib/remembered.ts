// A cache for results that are pure and cheap to compute again: bounded by clearing it whole when
// full, which costs one recomputation per key rather than any bookkeeping per hit.

/** `compute(key)`, remembered in `map` until it holds `max` entries and is cleared. */
export function remembered<K, V>(map: Map<K, V>, key: K, compute: (key: K) => V, max = 4096): V {
  if (map.has(key)) return map.get(key) as V;
  const value = compute(key);
  if (map.size >= max) map.clear();
  map.set(key, value);
  return value;
}
