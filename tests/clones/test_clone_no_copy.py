"""Item 8 of issue 28: a clone's compactor does not copy the parent it was opened from."""

from __future__ import annotations

import random
import time
from dataclasses import replace
from pathlib import Path

from shaledb import Compactor, CompactorOptions, Db, Settings, WriteBatch
from shaledb.compaction.scheduler import parse_shape, schedule
from shaledb.manifest.model import SortedRun, Tree

MiB = 1 << 20


def _bytes_under(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _inherited(shape: str) -> object:
    """The manifest of ``shape`` with every SST inherited from a parent (db 1)."""
    m = parse_shape(shape)
    t = m.data
    l0 = tuple(replace(s, db=1) for s in t.l0)
    runs = tuple(SortedRun(r.id, tuple(replace(s, db=1) for s in r.ssts)) for r in t.runs)
    return replace(m, data=Tree(l0, runs))


def test_the_scheduler_counts_only_a_clones_own_data() -> None:
    opts = CompactorOptions()
    for shape in ("L0: 10 10 10 10 10 | runs: 100", "L0: | runs: 100 100 100 100 100", "L0: 90 | runs: 100"):
        assert schedule(parse_shape(shape), opts), shape  # a database's own data: compacted
        assert schedule(_inherited(shape), opts) == [], shape  # the same data inherited: left alone
    m = _inherited("L0: 10 10 10 10 10 | runs: 100")
    own = parse_shape("L0: 1 1 1 1").data.l0
    grown = replace(m, data=Tree(own + m.data.l0, m.data.runs))
    (spec,) = schedule(grown, opts)  # the clone's own L0 SSTs make it worthwhile: every L0 SST merges
    assert len(spec.l0) == 9


def test_a_clone_of_a_100_mb_parent_plus_1000_puts_stores_under_5_percent(tmp_path: Path) -> None:
    seed = 2808
    print(f"seed {seed}")
    blob = random.Random(seed).randbytes(MiB)
    parent_dir, clone_dir = tmp_path / "parent", tmp_path / "clone"
    # Five L0 SSTs of about 20 MiB and no compactor: the shape that made the clone compact at once.
    parent_settings = Settings(
        compactor=None,
        garbage_collector=None,
        compression="none",
        l0_sst_size_bytes=20 * MiB,
        max_unflushed_bytes=64 * MiB,
    )
    with Db.open(parent_dir, settings=parent_settings) as parent:
        for i in range(0, 400, 20):
            b = WriteBatch()
            for j in range(i, i + 20):
                off = (j * 7919) % (MiB - 256 * 1024)
                b.put(b"p%06d" % j, blob[off : off + 256 * 1024])
            parent.write(b, durable=False)
        parent.flush(memtable=True)
        assert len(parent.manifest.data.l0) >= 4
        parent_bytes = parent.manifest.data.size  # its SSTs (its WAL objects wait for a GC)
    assert parent_bytes > 100e6

    busy = Settings(garbage_collector=None, compactor=CompactorOptions(poll_interval_s=0.05))
    with Db.open_from_checkpoint(clone_dir, parent_dir, settings=busy) as clone:
        for i in range(1000):
            clone.put(b"c%06d" % i, b"v%d" % i, durable=False)
        clone.flush(memtable=True)
        time.sleep(1.0)  # the embedded compactor's turn (it woke on the flush)
    Compactor.open(str(clone_dir), CompactorOptions()).run_once()  # and once more, deterministically
    own = _bytes_under(clone_dir)
    print(f"clone stores {own} bytes of its own; the parent {parent_bytes}")
    assert own < 0.05 * parent_bytes
    with Db.open(clone_dir, settings=busy) as clone:
        assert clone[b"c000999"] == b"v999" and len(clone[b"p000399"]) == 256 * 1024
