"""On the moto S3 server: GC, backup, verify and a hard destroy go through bulk deletes and
parallel copies, and nothing a live version needs is lost."""

from __future__ import annotations

from typing import Any

from shaledb import CompactorOptions, Db, GarbageCollector, GcOptions, Settings, admin
from shaledb.admin.verify import verify
from shaledb.compaction import Compactor
from shaledb.journal.backup import backup_url
from shaledb.store.wrappers import InstrumentedStore

QUIET = Settings(
    compactor=None,
    garbage_collector=None,
    l0_sst_size_bytes=4096,
    max_unflushed_bytes=1 << 20,
    l0_max_ssts=1000,
)


def test_gc_backup_verify_and_destroy_on_s3(s3_url_factory: Any) -> None:
    src, dst = s3_url_factory(), s3_url_factory()
    opts = src.options
    with Db.open(src.url, settings=QUIET, store_options=opts) as db:
        for r in range(8):
            for i in range(60):
                db.put(b"k%04d" % ((r * 37 + i) % 300), b"v%d" % r * 30, durable=False)
            db.flush(memtable=True)
        want = dict(db.scan())
    Compactor.open(src.url, options=CompactorOptions(min_l0_ssts=2), store_options=opts).run_once()
    store = InstrumentedStore(src.open())  # type: ignore[attr-defined]
    report = GarbageCollector.open(store=store, options=GcOptions(min_age_s=0)).run_once()
    requests = store.snapshot().requests
    assert report.counts()["sst"] >= 8 and report.counts()["wal"] > 0
    assert requests["delete"] == 0 and 1 <= requests["delete_many"] <= 6
    assert verify(src.url, store_options=opts, workers=4).ok
    rep = backup_url(src.url, dst.url, store_options=opts, workers=4)
    assert rep.copied == rep.objects > 0 and rep.server_side
    backup = verify(dst.url, store_options=opts, workers=4)
    assert backup.ok and backup.ssts >= 1, backup.problems
    with Db.open(dst.url, settings=QUIET, store_options=opts) as bk:
        assert dict(bk.scan()) == want
    admin.destroy(src.url, soft=False, store_options=opts)
    assert list(src.open().list("")) == []  # type: ignore[attr-defined]
