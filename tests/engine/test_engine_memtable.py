"""The memtable's sorted-key bookkeeping against a dict model (batches that overwrite,
repeat keys within a batch, and interleave sorted reads that merge the new keys)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from shaledb.engine.memtable import Memtable
from shaledb.testing.seeds import test_seed

keys = st.binary(min_size=1, max_size=3)
batches = st.lists(st.tuples(st.lists(keys, min_size=1, max_size=12), st.booleans()), min_size=1, max_size=30)


@settings(max_examples=300, deadline=None)
@given(batches)
def test_put_many_keeps_sorted_keys_equal_to_the_model(script: list[tuple[list[bytes], bool]]) -> None:
    m = Memtable()
    model: dict[bytes, tuple[int, int, bytes]] = {}
    for seq, (ks, read) in enumerate(script, start=1):
        entries = [(seq, 0, k + b"@%d" % i) for i, k in enumerate(ks)]
        m.put_many(ks, entries)
        model.update(zip(ks, entries))
        if read:
            assert m.sorted_keys() == sorted(model)
    assert m.sorted_keys() == sorted(model)
    assert m.range_keys(b"\x01", b"\x80") == [k for k in sorted(model) if b"\x01" <= k < b"\x80"]
    assert [m.get(k) for k in sorted(model)] == [model[k] for k in sorted(model)]


def test_concurrent_sorted_reads_never_miss_a_key() -> None:
    """Scans of one memtable (a snapshot's, while the flusher sorts it too) read its key lists
    outside the write lock: a key merged by one reader must never be missing for another
    (the killed-compactor process test saw snapshot scans return older versions)."""
    import sys
    import threading

    seed = test_seed()
    rng = random.Random(seed)
    m = Memtable()
    stop = threading.Event()
    misses: list[str] = []

    def writer() -> None:
        i = 0
        while not stop.is_set() and i < 40_000:
            m.put(b"%08d" % rng.randrange(10**8), (i, 0, b""))
            i += 1

    def reader() -> None:
        while not stop.is_set():
            n = len(m.d)  # every key present now must be listed
            got = m.range_keys(None, None) if rng.random() < 0.5 else m.sorted_keys()
            if len(set(got)) < n:
                misses.append(f"listed {len(set(got))} keys of at least {n}")
                stop.set()

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=writer), *(threading.Thread(target=reader) for _ in range(2))]
        for t in threads:
            t.start()
        threads[0].join(30)
        stop.set()
        for t in threads[1:]:
            t.join(30)
    finally:
        sys.setswitchinterval(old)
    assert not misses, f"seed={seed}: {misses[:3]}"
    assert m.sorted_keys() == sorted(m.d)
