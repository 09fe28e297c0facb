"""The garbage collector against pins taken while its pass runs: a snapshot, a checkpoint or a
reader pinning a version written after the pass read its manifest keeps every object of it.

The interleaving is injected through store wrappers, so it happens on every run: the writer's
flush is held between writing its L0 SST and committing the manifest that names it; the pass
starts (the SST is now "old enough" at ``min_age_s=0``) and reads the manifest without it; when
the pass lists ``compacted/``, the flush commits, a pin is taken on that version, and a compaction
removes the SST from the latest version before the listing is returned.
"""

from __future__ import annotations

import threading

import pytest
from gc_support import ActOnSstListing, memory_store

from shaledb import CompactorOptions, Db, DbReader, GarbageCollector, GcOptions, Settings, admin
from shaledb.compaction import Compactor
from shaledb.errors import ObjectNotFound
from shaledb.format import paths
from shaledb.store import ObjectStore
from shaledb.store.wrappers import StoreWrapper
from shaledb.testing.faults import OnFirstGet

NO_BG = Settings(
    l0_sst_size_bytes=1 << 20,
    max_unflushed_bytes=1 << 22,
    l0_max_ssts=1000,
    compactor=None,
    garbage_collector=None,
)


class HeldManifestPut(StoreWrapper):
    """The writer's store: once ``armed``, its next manifest write waits for ``release``."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.armed = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def put(self, path, data, *, create=False, attributes=None):  # type: ignore[no-untyped-def]
        if self.armed and path.startswith(paths.MANIFEST_DIR):
            self.armed = False
            self.entered.set()
            assert self.release.wait(60), "the test never released the held manifest write"
        self.inner.put(path, data, create=create, attributes=attributes)


def _put(db: Db, tag: bytes, n: int = 60) -> dict[bytes, bytes]:
    rows = {b"k%04d" % (i * 7 % 97): tag + b"%d" % i * 6 for i in range(n)}
    for k, v in rows.items():
        db.put(k, v, durable=False)
    return rows


@pytest.mark.parametrize("pin", ["snapshot", "checkpoint", "reader"])
def test_a_pin_on_a_version_written_during_the_pass_keeps_its_l0_ssts_at_min_age_zero(pin: str) -> None:
    with memory_store() as mem:
        held = HeldManifestPut(mem)
        db = Db.open(store=held, settings=NO_BG)
        model = _put(db, b"a")
        db.flush(memtable=True)  # one L0 in the version the pass reads
        model.update(_put(db, b"b"))
        held.armed = True
        flush = threading.Thread(target=db.flush, kwargs={"memtable": True})
        flush.start()
        assert held.entered.wait(60)  # its L0 SST is written, the manifest naming it is not
        before = {paths.parse_sst_id(m.path) for m in mem.list(paths.SST_DIR)}
        pinned: dict[str, object] = {}

        def during_the_pass() -> None:
            held.release.set()
            flush.join()
            if pin == "snapshot":
                pinned["snap"] = db.snapshot()
            elif pin == "checkpoint":
                pinned["cp"] = db.create_checkpoint()
            else:
                pinned["reader"] = DbReader.open(store=mem, manifest_poll_interval_s=60)
            # The compaction replaces both L0s; the writer adopts (and pins) its result.
            Compactor.open(store=mem, options=CompactorOptions(min_l0_ssts=2)).run_once()
            db.refresh_manifest()
            assert not db.manifest.data.l0

        gc = GarbageCollector(
            ActOnSstListing(mem, during_the_pass),
            GcOptions(min_age_s=0),
            clock=db.clock,
            rng=db.rng,
        )
        report = gc.run_once()
        assert len(before) == 2
        lost = sorted(set(report.deleted["sst"]) & {paths.sst_path(i) for i in before if i})
        if pin == "snapshot":
            snap = pinned["snap"]
            assert dict(snap.scan()) == model, f"the pass deleted {lost}"  # type: ignore[attr-defined]
            snap.close()  # type: ignore[attr-defined]
        elif pin == "checkpoint":
            with DbReader.open(store=mem, checkpoint=pinned["cp"]) as r:  # type: ignore[arg-type]
                assert dict(r.scan()) == model, f"the pass deleted {lost}"
        else:
            reader = pinned["reader"]
            assert dict(reader.scan()) == model, f"the pass deleted {lost}"  # type: ignore[attr-defined]
            reader.close()  # type: ignore[attr-defined]
        db.close()


@pytest.mark.parametrize("dropped", [True, False], ids=["checkpoint-dropped", "checkpoint-live"])
def test_a_pinned_version_another_collector_deleted_is_quiet_and_a_missing_one_is_an_error(
    dropped: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Two collectors racing: this pass read the latest manifest (a checkpoint pinning version
    P in it), then the checkpoint was deleted and another collector deleted P; reading P
    logged ERROR "checkpoint ... pins manifest P, which is missing" about a checkpoint that
    no longer existed. That is DEBUG now; P missing while its checkpoint is still live in
    the latest manifest stays an ERROR."""
    with memory_store() as mem:
        db = Db.open(store=mem, settings=NO_BG)
        _put(db, b"a")
        db.flush(memtable=True)
        cp = admin.create_checkpoint(store=mem, name="pin")
        _put(db, b"b")
        db.flush(memtable=True)
        db.close()

        def other_collector() -> None:
            if dropped:
                admin.delete_checkpoint(None, cp.id, store=mem)
                GarbageCollector.open(store=mem).run_once(min_age_s=0)
            else:
                mem.delete(paths.manifest_path(cp.manifest_id))  # lost, checkpoint still live
            with pytest.raises(ObjectNotFound):
                mem.get(paths.manifest_path(cp.manifest_id))

        gc = GarbageCollector.open(
            store=OnFirstGet(mem, paths.manifest_path(cp.manifest_id), other_collector)
        )
        with caplog.at_level("DEBUG", logger="shaledb"):
            gc.run_once(min_age_s=0)
        about = [r for r in caplog.records if f"manifest {cp.manifest_id}" in r.getMessage()]
        levels = {r.levelname for r in about if str(cp.id) in r.getMessage()}
        assert levels == ({"DEBUG"} if dropped else {"ERROR"}), [(r.levelname, r.getMessage()) for r in about]
