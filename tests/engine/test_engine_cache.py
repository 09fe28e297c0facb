"""The block cache: LRU order, the byte budget, and lock-free hits racing evictions."""

from __future__ import annotations

import random
import sys
from concurrent.futures import ThreadPoolExecutor

from shaledb.engine.cache import LruCache
from shaledb.testing.seeds import test_seed


def test_lru_order_and_byte_budget() -> None:
    c = LruCache(100)
    c.put(("a", 0), "A", 40)
    c.put(("b", 0), "B", 40)
    assert c.get(("a", 0)) == "A"  # a is now the most recent
    c.put(("c", 0), "C", 40)  # over budget: the least recent (b) goes
    assert c.get(("b", 0)) is None
    assert c.get(("a", 0)) == "A" and c.get(("c", 0)) == "C"
    assert c.size_bytes == 80 and len(c) == 2
    c.put(("big", 0), "X", 101)  # larger than the whole cache: not kept, nothing evicted
    assert c.get(("big", 0)) is None and len(c) == 2
    c.put(("a", 0), "A2", 10)  # replacing an entry re-counts its size
    assert c.get(("a", 0)) == "A2" and c.size_bytes == 50
    c.discard(("c", 0))
    assert c.size_bytes == 10 and c.get(("c", 0)) is None
    assert c.hits == 4 and c.misses == 3


def test_hits_race_puts_and_evictions() -> None:
    """Readers take no lock; writers evict constantly. No error, values stay right,
    and the byte count matches the entries left."""
    seed = test_seed()
    c = LruCache(64 * 10)
    keys = [(f"sst{i % 7}", i) for i in range(200)]

    def writer(w: int) -> None:
        rng = random.Random(seed + w)
        for _ in range(20_000):
            k = rng.choice(keys)
            r = rng.random()
            if r < 0.01:
                c.discard_where(lambda key, sst=k[0]: key[0] == sst)  # TableCache.evict
            elif r < 0.1:
                c.discard(k)
            else:
                c.put(k, k[1], 64)

    def reader(r: int) -> int:
        rng = random.Random(seed + 100 + r)
        seen = 0
        for _ in range(40_000):
            k = rng.choice(keys)
            v = c.get(k)
            if v is not None:
                assert v == k[1]
                seen += 1
        return seen

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads between almost any two bytecodes
    try:
        with ThreadPoolExecutor(6) as pool:
            writers = [pool.submit(writer, w) for w in range(2)]
            readers = [pool.submit(reader, r) for r in range(4)]
            for f in writers:
                f.result()
            assert sum(f.result() for f in readers) > 0
    finally:
        sys.setswitchinterval(old)
    assert c.size_bytes == 64 * len(c) <= 64 * 10
