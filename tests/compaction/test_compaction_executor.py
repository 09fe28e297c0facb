"""The executor: what a merge keeps, how it cuts SSTs, and subcompaction ranges."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest
from compaction_support import Row, memory_store, read_rows, visible, write_sst

from shaledb.compaction import CompactionAborted, CompactionSpec, Executor, apply_compaction
from shaledb.errors import FencedError
from shaledb.format.row import FLAG_EXPIRY, FLAG_META, KIND_TOMBSTONE, encode_payload
from shaledb.manifest.model import Manifest, SortedRun, Tree
from shaledb.testing.clock import ManualClock
from shaledb.testing.seeds import test_seed

NOW_MS = 5_000_000


def executor(store, **kw) -> Executor:  # type: ignore[no-untyped-def]
    opts = {
        "clock": ManualClock(NOW_MS / 1000),
        "rng": random.Random(1),
        "block_size": 512,
        "codec": 0,
        "bloom_bits_per_key": 10,
        "max_sst_size_bytes": 1 << 20,
    }
    opts.update(kw)
    return Executor(store, **opts)


def v(key: bytes, seq: int, value: bytes) -> Row:
    return (key, seq, 0, value)


def tomb(key: bytes, seq: int) -> Row:
    return (key, seq, KIND_TOMBSTONE, b"")


def ttl(key: bytes, seq: int, value: bytes, expires_ms: int) -> Row:
    flags, payload = encode_payload(value, b"m", expires_ms)
    return (key, seq, flags, payload)


def test_newest_version_wins_and_tombstones_stay_above_the_bottom() -> None:
    with memory_store() as store:
        old_run = SortedRun(1, (write_sst(store, [v(b"a", 1, b"a1"), v(b"b", 2, b"b1"), v(b"c", 3, b"c1")]),))
        l0_old = write_sst(store, [v(b"a", 10, b"a2"), tomb(b"b", 11)])
        l0_new = write_sst(store, [tomb(b"a", 20), v(b"d", 21, b"d1")])
        ex = executor(store)
        # L0 only, with a run below: not the bottom, tombstones must survive.
        spec = CompactionSpec("data", (l0_new, l0_old), (), 2, bottom=False)
        rows = read_rows(store, ex.execute(spec).ssts)
        assert rows == [tomb(b"a", 20), tomb(b"b", 11), v(b"d", 21, b"d1")]
        # Everything into the bottom: tombstones and what they hid are gone.
        spec = CompactionSpec("data", (l0_new, l0_old), (old_run,), 2, bottom=True)
        rows = read_rows(store, ex.execute(spec).ssts)
        assert rows == [v(b"c", 3, b"c1"), v(b"d", 21, b"d1")]


def test_expired_entries_become_tombstones_above_the_bottom_and_vanish_at_it() -> None:
    with memory_store() as store:
        below = write_sst(store, [v(b"k", 1, b"old"), v(b"x", 2, b"x")])
        src = write_sst(
            store,
            [ttl(b"k", 5, b"gone", NOW_MS - 1), ttl(b"live", 6, b"yes", NOW_MS + 10_000), v(b"x", 7, b"x2")],
        )
        ex = executor(store)
        rows = read_rows(store, ex.execute(CompactionSpec("data", (src,), (), 9, bottom=False)).ssts)
        assert rows[0] == (b"k", 5, KIND_TOMBSTONE, b"")  # still hides b"k" = b"old" below
        assert rows[1][0] == b"live" and rows[1][2] == FLAG_META | FLAG_EXPIRY
        # Over the whole tree the expired key disappears, and so does what it hid.
        run = SortedRun(1, (below,))
        rows = read_rows(store, ex.execute(CompactionSpec("data", (src,), (run,), 9, bottom=True)).ssts)
        assert [r[0] for r in rows] == [b"live", b"x"]
        assert visible(rows, NOW_MS) == {b"live": b"yes", b"x": b"x2"}


def test_versions_inside_one_source_keep_the_newest() -> None:
    with memory_store() as store:
        src = write_sst(store, [v(b"a", 9, b"new"), v(b"a", 3, b"old"), v(b"b", 4, b"b")])
        rows = read_rows(store, executor(store).execute(CompactionSpec("data", (src,), (), 1, True)).ssts)
        assert rows == [v(b"a", 9, b"new"), v(b"b", 4, b"b")]


def test_output_ssts_are_cut_at_the_size_limit_between_keys() -> None:
    with memory_store() as store:
        rows = [v(b"key%06d" % i, i + 1, bytes([i % 251]) * (20 + i % 70)) for i in range(5000)]
        srcs = tuple(write_sst(store, rows[i::3]) for i in range(3))  # three interleaved L0s
        ex = executor(store, max_sst_size_bytes=16 * 1024, chunk_bytes=8 * 1024)
        res = ex.execute(CompactionSpec("data", srcs, (), 1, True))
        assert len(res.ssts) > 10
        for a, b in zip(res.ssts, res.ssts[1:]):
            assert a.last_key < b.first_key  # a valid sorted run: no key in two SSTs
        assert all(s.size <= 16 * 1024 + 4096 for s in res.ssts)
        assert read_rows(store, res.ssts) == rows
        assert res.entries_read == res.entries_written == 5000
        assert res.input_bytes == sum(s.size for s in srcs)


def _random_tree(store, rng: random.Random):  # type: ignore[no-untyped-def]
    """Random L0s and runs over a small key space, with tombstones and expiring entries."""
    seq = 0
    keys = [b"k%04d" % i for i in range(rng.randrange(20, 400))]

    def entry(k: bytes) -> Row:
        nonlocal seq
        seq += 1
        r = rng.random()
        if r < 0.15:
            return tomb(k, seq)
        if r < 0.3:
            return ttl(k, seq, b"t%d" % seq, NOW_MS + rng.choice([-5, 5]) * 1000)
        return v(k, seq, b"v%d-" % seq * rng.randrange(1, 30))

    runs = []
    for rid in range(1, rng.randrange(1, 4)):
        chosen = sorted(rng.sample(keys, rng.randrange(1, len(keys))))
        rows = [entry(k) for k in chosen]
        ssts = []
        n = rng.randrange(1, 4)
        step = -(-len(rows) // n)
        for i in range(0, len(rows), step):
            ssts.append(write_sst(store, rows[i : i + step], block_size=rng.choice([128, 512, 4096])))
        runs.append(SortedRun(rid, tuple(ssts)))
    runs.reverse()  # newest run first (higher seqs were written last)
    l0 = []
    for _ in range(rng.randrange(0, 5)):
        chosen = sorted(rng.sample(keys, rng.randrange(1, len(keys))))
        l0.append(write_sst(store, [entry(k) for k in chosen], block_size=rng.choice([128, 512])))
    l0.reverse()
    return tuple(l0), tuple(runs)


def _expected(store, l0, runs, bottom: bool) -> dict[bytes, bytes]:  # type: ignore[no-untyped-def]
    rows: list[Row] = []
    for s in l0:
        rows.extend(read_rows(store, [s]))
    for r in runs:
        rows.extend(read_rows(store, r.ssts))
    # Stable sort by key keeps source order (newest first) among equal keys.
    rows.sort(key=lambda r: r[0])
    return visible(rows, NOW_MS)


@pytest.mark.parametrize("round_", range(3))
def test_random_merges_match_the_reference_and_subcompactions_match_one_pass(round_: int) -> None:
    seed = test_seed()
    rng = random.Random(seed)
    for _ in range(6):
        with memory_store() as store:
            l0, runs = _random_tree(store, rng)
            if not l0 and not runs:
                continue
            bottom = rng.random() < 0.5
            spec = CompactionSpec("data", l0, runs, 99, bottom)
            ex = executor(
                store,
                max_sst_size_bytes=rng.choice([4096, 16384, 1 << 20]),
                chunk_bytes=rng.choice([256, 2048, 1 << 20]),
                read_ahead_bytes=rng.choice([600, 1 << 20]),
            )
            one = ex.execute(spec)
            rows_one = read_rows(store, one.ssts)
            keys = [r[0] for r in rows_one]
            assert keys == sorted(set(keys)), f"seed={seed}"
            if bottom:
                assert all(r[2] & 3 != KIND_TOMBSTONE for r in rows_one), f"seed={seed}"
            # What a reader sees over the output equals what it saw over the sources.
            assert visible(rows_one, NOW_MS) == _expected(store, l0, runs, bottom), f"seed={seed}"
            n = rng.randrange(2, 6)
            ranges = ex.plan_ranges(spec, n)
            assert 1 <= len(ranges) <= n and ranges[0][0] is None and ranges[-1][1] is None
            for (_, hi), (lo, _) in itertools.pairwise(ranges):
                assert hi == lo
            parts = [ex.execute_range(spec, lo, hi) for lo, hi in ranges]
            rows_parts = read_rows(store, [s for p in parts for s in p.ssts])
            assert rows_parts == rows_one, f"seed={seed}"
            par = ex.execute(spec, max_subcompactions=n)
            assert read_rows(store, par.ssts) == rows_one, f"seed={seed}"
            assert par.ranges == len(ranges)


# ----------------------------------------------------------------- commit


def _m(l0: tuple, runs: tuple, **kw) -> Manifest:  # type: ignore[type-arg]
    return Manifest(id=7, data=Tree(l0, runs), compactor_epoch=3, next_run_id=5, **kw)


def test_commit_keeps_l0s_flushed_meanwhile_and_places_the_run() -> None:
    with memory_store() as store:
        a, b, c, new = (write_sst(store, [v(bytes([97 + i]), i + 1, b"x")]) for i in range(4))
        run = SortedRun(4, (write_sst(store, [v(b"z", 1, b"z")]),))
        out = (write_sst(store, [v(b"a", 3, b"x")]),)
        spec = CompactionSpec("data", (b, a), (), 5, bottom=False)
        m = _m((new, c, b, a), (run,))  # new and c were flushed after scheduling
        nxt = apply_compaction(m, spec, out, epoch=3)
        assert nxt.data.l0 == (new, c)
        assert [r.id for r in nxt.data.runs] == [5, 4]
        assert nxt.next_run_id == 6
        # A merge of runs replaces them where they were; empty output removes them.
        r1, r2, r3 = (SortedRun(i, (write_sst(store, [v(b"q", i, b"q")]),)) for i in (3, 2, 1))
        m = _m((), (r1, r2, r3))
        spec = CompactionSpec("data", (), (r2, r3), 8, bottom=True)
        assert [r.id for r in apply_compaction(m, spec, out, epoch=3).data.runs] == [3, 8]
        assert [r.id for r in apply_compaction(m, spec, (), epoch=3).data.runs] == [3]


def test_commit_aborts_when_sources_changed_and_fences_old_epochs() -> None:
    with memory_store() as store:
        a, b = (write_sst(store, [v(bytes([97 + i]), i + 1, b"x")]) for i in range(2))
        r1, r2 = (SortedRun(i, (write_sst(store, [v(b"q", i, b"q")]),)) for i in (2, 1))
        spec = CompactionSpec("data", (a,), (), 5, bottom=False)
        with pytest.raises(FencedError):
            apply_compaction(_m((a,), ()), spec, (), epoch=2)
        with pytest.raises(CompactionAborted):
            apply_compaction(_m((b,), ()), spec, (), epoch=3)  # a was compacted by someone else
        with pytest.raises(CompactionAborted):
            apply_compaction(_m((a, b), ()), spec, (), epoch=3)  # a is no longer the oldest
        spec = CompactionSpec("data", (), (r1, r2), 5, bottom=True)
        with pytest.raises(CompactionAborted):
            apply_compaction(_m((), (r2,)), spec, (), epoch=3)
        r3 = SortedRun(3, r2.ssts)
        with pytest.raises(CompactionAborted):
            apply_compaction(_m((), (r1, r2, r3)), spec, (), epoch=3)  # not the bottom any more
        # A destination id taken meanwhile is replaced by a fresh one.
        spec = CompactionSpec("data", (a,), (), 2, bottom=False)
        nxt = apply_compaction(_m((a,), (r1, r2)), replace(spec), (b,), epoch=3)
        assert [r.id for r in nxt.data.runs] == [5, 2, 1] and nxt.next_run_id == 6
