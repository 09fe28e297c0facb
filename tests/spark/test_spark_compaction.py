"""Compaction as a Spark job produces what the single-process compactor produces."""

from __future__ import annotations

import random
import shutil

import pytest
from spark_kit import contents, latest

from shaledb import Compactor, Db, FencedError, Settings
from shaledb import spark as shale_spark
from shaledb.compaction import schedule
from shaledb.format.sst import decode_sst
from shaledb.settings import CompactorOptions
from shaledb.store import open_store
from shaledb.testing.seeds import test_seed

pytestmark = pytest.mark.spark
pytest.importorskip("pyspark")

OPTIONS = CompactorOptions(min_l0_ssts=3, max_sst_size_bytes=256 * 1024)
SETTINGS = Settings(
    compactor=None, garbage_collector=None, l0_sst_size_bytes=128 * 1024, flush_interval_s=0.01
)


def tree_rows(url: str) -> tuple[tuple[int, int], list[list[tuple[bytes, int, int, bytes]]]]:
    """The tree's shape (L0 SSTs, runs) and each run's entries in key order."""
    m = latest(url)
    st = open_store(url)
    runs = []
    for run in m.data.runs:
        rows = []
        for s in run.ssts:
            _, blocks = decode_sst(st.get(f"compacted/{s.id}.sst"))
            for b in blocks:
                rows.extend(zip(b.keys, b.seqs, b.kinds, b.payloads(0, len(b))))
        runs.append(rows)
    return (len(m.data.l0), len(m.data.runs)), runs


def build(url: str, seed: int) -> None:
    rng = random.Random(seed)
    keys = [b"key-%06d" % i for i in range(8000)]
    with Db.open(url, settings=SETTINGS) as db:
        for round_ in range(4):
            for k in rng.sample(keys, 3000):
                if rng.random() < 0.1:
                    db.delete(k, durable=False)
                else:
                    db.put(k, b"%d-" % round_ + rng.randbytes(40), durable=False)
            db.flush(memtable=True)
            if round_ == 1:
                Compactor.open(url, OPTIONS, settings=SETTINGS).run_once()  # some sorted runs too


def test_spark_compaction_equals_the_local_compactor(spark, tmp_path):
    seed = test_seed()
    a, b = str(tmp_path / "local"), str(tmp_path / "spark")
    build(a, seed)
    shutil.copytree(a, b)
    assert schedule(latest(a), OPTIONS)  # there is work to do
    before = contents(a)
    local = Compactor.open(a, OPTIONS, settings=SETTINGS).run_once()
    report = shale_spark.compact(spark, b, settings=SETTINGS, options=OPTIONS, partitions=4)
    assert report.committed == local.committed >= 1 and report.tasks > report.committed
    assert tree_rows(a) == tree_rows(b)
    assert contents(b) == before
    # Settling leaves nothing for either compactor.
    shale_spark.compact(spark, b, settings=SETTINGS, options=OPTIONS, until_settled=True)
    assert schedule(latest(b), OPTIONS) == []
    assert contents(b) == before


def test_a_spark_compaction_fenced_by_a_newer_compactor_commits_nothing(spark, tmp_path, monkeypatch):
    url = str(tmp_path / "db")
    build(url, 1)
    before = latest(url)
    files = {m.path for m in open_store(url).list("compacted/")}
    from shaledb.spark import compaction as spark_compaction

    real = spark_compaction._run_job

    def run_job_then_get_fenced(sc, c, *args):
        Compactor.open(url, OPTIONS, settings=SETTINGS, takeover=True)  # a newer one claims the epoch
        return real(sc, c, *args)

    monkeypatch.setattr(spark_compaction, "_run_job", run_job_then_get_fenced)
    with pytest.raises(FencedError, match="took over"):
        shale_spark.compact(spark, url, settings=SETTINGS, options=OPTIONS)
    assert latest(url).data == before.data  # nothing committed
    assert {m.path for m in open_store(url).list("compacted/")} == files  # its outputs were deleted
