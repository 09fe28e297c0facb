"""The size-tiered scheduler on LSM shapes written in the shape DSL."""

from __future__ import annotations

import random

import pytest

from shaledb.compaction.compactor import working_set
from shaledb.compaction.scheduler import CompactionSpec, format_shape, parse_shape, schedule
from shaledb.settings import CompactorOptions, Settings
from shaledb.testing.seeds import test_seed

OPTS = CompactorOptions(
    min_l0_ssts=4, max_sources=8, min_merge_runs=4, size_ratio=4.0, max_space_amplification=None
)


def plan(shape: str, opts: CompactorOptions = OPTS) -> list[str]:
    """Each spec as ``"L0xN+runs a,b->dest[!]"`` (``!`` marks the bottom)."""
    m = parse_shape(shape)
    out = []
    for s in schedule(m, opts):
        parts = []
        if s.l0:
            parts.append(f"L0x{len(s.l0)}")
        if s.runs:
            parts.append("runs " + ",".join(str(r) for r in s.run_ids))
        out.append("+".join(parts) + f"->{s.dest_run_id}" + ("!" if s.bottom else ""))
    return out


def test_dsl_round_trip() -> None:
    shape = "L0: 10 20 | runs: 400 100x3"
    m = parse_shape(shape)
    assert format_shape(m) == shape
    assert [r.id for r in m.data.runs] == [2, 1]
    assert m.next_run_id == 3
    assert len(m.data.runs[1].ssts) == 3


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        ("L0: | runs:", []),
        ("L0: 10 10 10 | runs:", []),
        ("L0: 10 10 10 10 | runs:", ["L0x4->1!"]),
        ("L0: 10 10 10 10 10 | runs: 100", ["L0x5->2"]),
        ("L0: | runs: 100", []),
        ("L0: | runs: 100 100 100", []),
        ("L0: | runs: 100 100 100 100", ["runs 4,3,2,1->5!"]),
        ("L0: | runs: 100 100 100 100 10000", ["runs 5,4,3,2->6"]),
        # 500 > 4 x 100 breaks the window; the four similar runs below it merge.
        ("L0: | runs: 10 500 100 100 100 100", ["runs 4,3,2,1->7!"]),
        ("L0: | runs: " + " ".join(["100"] * 10), ["runs 10,9,8,7,6,5,4,3->11"]),
        ("L0: 1 1 1 1 | runs: 10 10 10 10", ["L0x4->5", "runs 4,3,2,1->6!"]),
    ],
)
def test_size_tiered(shape: str, expected: list[str]) -> None:
    assert plan(shape) == expected


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        # Above the bottom run: 60 > 0.5 x 100 -> everything merges into the bottom.
        ("L0: 60 | runs: 100", ["L0x1+runs 1->2!"]),
        ("L0: 40 | runs: 100", []),
        ("L0: 20 | runs: 40 100", ["L0x1+runs 2,1->3!"]),
        ("L0: 10 10 10 10 | runs: 1000", ["L0x4->2"]),
    ],
)
def test_space_amplification(shape: str, expected: list[str]) -> None:
    opts = CompactorOptions(min_l0_ssts=4, max_space_amplification=0.5)
    assert plan(shape, opts) == expected


def _overlap(a: CompactionSpec, b: CompactionSpec) -> bool:
    return bool(set(a.l0_ids) & set(b.l0_ids) or set(a.run_ids) & set(b.run_ids))


def test_random_shapes_never_overlap_and_respect_limits() -> None:
    seed = test_seed()
    rng = random.Random(seed)
    for _ in range(500):
        l0 = " ".join(str(rng.choice([1, 5, 10, 50])) for _ in range(rng.randrange(0, 12)))
        runs = " ".join(str(rng.choice([10, 40, 100, 400, 1000, 4000])) for _ in range(rng.randrange(0, 14)))
        shape = f"L0: {l0} | runs: {runs}"
        opts = CompactorOptions(
            min_l0_ssts=rng.randrange(1, 6),
            max_sources=rng.randrange(4, 9),
            min_merge_runs=rng.randrange(2, 5),
            size_ratio=rng.choice([1.0, 2.0, 4.0]),
            max_space_amplification=rng.choice([None, 0.5, 2.0]),
        )
        m = parse_shape(shape)
        specs = schedule(m, opts)
        ctx = f"seed={seed} shape={shape!r} opts={opts}"
        dests = [s.dest_run_id for s in specs]
        assert len(set(dests)) == len(dests), ctx
        assert all(d >= m.next_run_id for d in dests), ctx
        for i, a in enumerate(specs):
            assert a.l0 or len(a.runs) >= 2 or (a.runs and a.l0), ctx
            for b in specs[i + 1 :]:
                assert not _overlap(a, b), ctx
            # L0 sources are the oldest L0s; runs are consecutive; bottom iff nothing below.
            t = m.data
            assert t.l0[len(t.l0) - len(a.l0) :] == a.l0, ctx
            if a.runs:
                ids = [r.id for r in t.runs]
                p = ids.index(a.runs[0].id)
                assert tuple(t.runs[p : p + len(a.runs)]) == a.runs, ctx
                assert a.bottom == (p + len(a.runs) == len(ids)), ctx
                if a.l0:
                    assert p == 0, ctx
                elif a.reason.endswith("similar runs"):
                    assert opts.min_merge_runs <= len(a.runs) <= opts.max_sources, ctx
                    sizes = [r.size for r in a.runs]
                    assert max(sizes) <= opts.size_ratio * min(sizes), ctx
            else:
                assert a.bottom == (not t.runs), ctx


def test_index_tree_is_scheduled_separately() -> None:
    from dataclasses import replace

    m = parse_shape("L0: 1 1 1 1 | runs:")
    m2 = replace(m, index=m.data, data=parse_shape("L0: | runs:").data)
    assert schedule(m2, OPTS, "data") == []
    (spec,) = schedule(m2, OPTS, "index")
    assert spec.tree == "index" and len(spec.l0) == 4


def test_compaction_working_set_follows_the_write_budget() -> None:
    mib = 1 << 20
    assert working_set(Settings(), CompactorOptions()) == (64 * mib, 4 * mib, 4 * mib)  # defaults: unchanged
    tight = Settings(max_unflushed_bytes=16 * mib, l0_sst_size_bytes=8 * mib)
    assert working_set(tight, CompactorOptions()) == (4 * mib, 256 * 1024, 1 * mib)
    tiny = Settings(max_unflushed_bytes=64 * 1024, l0_sst_size_bytes=4096)
    assert working_set(tiny, CompactorOptions()) == (1 * mib, 256 * 1024, 256 * 1024)  # floors
    assert working_set(tiny, CompactorOptions(max_sst_size_bytes=8192))[0] == 8192  # an explicit size wins
