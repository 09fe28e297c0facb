"""A process that reads objects through a shared disk cache and checks every byte.

Run by tests/store/test_disk_cache.py as a real separate process:
``python disk_cache_worker.py STORE_DIR CACHE_DIR CACHE_BYTES SECONDS SEED``.
Reads random ranges of the test's ``compacted/`` objects, through a
``DiskCachedStore`` over the local store, compares each with the object read
from the store directly, and prints ``hits misses corrupt errors`` at the end.
Exits 1 on the first wrong byte; runs until killed when SECONDS is 0.
"""

from __future__ import annotations

import random
import sys
import time

from shaledb.store import open_store
from shaledb.store.disk_cache import DiskCachedStore, acquire


def main() -> int:
    store_dir, cache_dir, cache_bytes, seconds, seed = sys.argv[1:6]
    rng = random.Random(int(seed))
    store = open_store(store_dir)
    truth = {m.path: store.get(m.path) for m in store.list("compacted/")}
    cached = DiskCachedStore(store, acquire(cache_dir, int(cache_bytes)))
    names = sorted(truth)
    deadline = time.monotonic() + float(seconds) if float(seconds) > 0 else None
    print("ready", flush=True)
    while deadline is None or time.monotonic() < deadline:
        path = rng.choice(names)
        data = truth[path]
        start = rng.randrange(len(data))
        end = min(len(data) + 10, start + rng.choice([1, 100, 5000, 70_000, 300_000]))
        if rng.random() < 0.3:
            other = rng.randrange(len(data))
            ranges = [(start, end), (other, other + 2000)]
            got = cached.get_ranges(path, ranges)
            want = [data[s:e] for s, e in ranges]
        else:
            got = [cached.get_range(path, start, end)]
            want = [data[start:end]]
        if got != want:
            print(f"WRONG BYTES {path} {start} {end}", flush=True)
            return 1
    print(cached.hits, cached.misses, cached.cache.corrupt, cached.cache.errors, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
