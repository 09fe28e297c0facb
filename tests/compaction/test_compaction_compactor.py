"""The compactor role: epochs and fencing, commits racing the writer, leases, the CLI."""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from compaction_support import NO_BG, memory_store

from shaledb import CompactorOptions, Db, FencedError, GarbageCollector, RetryOptions, Unavailable
from shaledb.admin import read_manifest
from shaledb.cli import main
from shaledb.compaction import Compactor, EmbeddedCompactor
from shaledb.engine.flush import l0_stall_hint
from shaledb.format import paths
from shaledb.manifest.options import OPT_COMPACTOR_RELEASED
from shaledb.store import ObjectStore, StoreWrapper

OPTS = CompactorOptions(min_l0_ssts=2, max_sst_size_bytes=8192, poll_interval_s=0.05)


def fill(db: Db, n: int, tag: bytes = b"v", flush_every: int = 50) -> dict[bytes, bytes]:
    model = {}
    for i in range(n):
        k = b"key%05d" % (i * 7919 % 997)
        val = tag + b"%d" % i * 8
        db.put(k, val, durable=False)
        model[k] = val
        if i % flush_every == flush_every - 1:
            db.flush(memtable=True)
    db.flush(memtable=True)
    return model


def test_standalone_compactor_reduces_the_tree_and_keeps_every_value() -> None:
    with memory_store() as store:
        db = Db.open(store=store, settings=NO_BG)
        model = fill(db, 600)
        assert len(db.manifest.data.l0) >= 10
        c = Compactor.open(store=store, options=OPTS)
        report = c.run_once()
        assert report.committed >= 1 and report.aborted == 0
        assert report.bytes_written > 0 and report.input_bytes > report.bytes_written
        m = c.manifest
        assert m is not None and len(m.data.l0) < 2
        db.refresh_manifest()  # the writer adopts the new version (and pins it)
        assert db.manifest.data.runs and not db.manifest.data.l0
        assert dict(db.scan()) == model
        assert all(db.get(k) == val for k, val in model.items())
        db.close()
        with Db.open(store=store, settings=NO_BG) as db2:
            assert dict(db2.scan()) == model


@pytest.mark.parametrize("subcompactions", [1, 3])
def test_progress_counts_the_bytes_merged_up_to_each_jobs_input(subcompactions: int) -> None:
    with memory_store() as store:
        with Db.open(store=store, settings=NO_BG) as db:
            model = fill(db, 600, flush_every=30)
        opts = CompactorOptions(min_l0_ssts=2, max_sst_size_bytes=8192, max_subcompactions=subcompactions)
        seen: list[tuple[int, int]] = []
        report = Compactor.open(store=store, options=opts, settings=NO_BG).run_once(
            progress=lambda done, total: seen.append((done, total))
        )
        assert report.committed >= 1 and len(seen) >= 2
        jobs: list[list[tuple[int, int]]] = [[]]
        for i, (done, total) in enumerate(seen):
            jobs[-1].append((done, total))
            if done == total and i + 1 < len(seen) and seen[i + 1] != (done, total):
                jobs.append([])  # a job ends at (total, total); the next one starts
        assert len(jobs) == report.committed
        assert sum(job[-1][1] for job in jobs) == report.input_bytes
        for job in jobs:
            dones = [d for d, _ in job]
            assert len({t for _, t in job}) == 1 and dones == sorted(dones) and job[-1][0] == job[-1][1]
        with Db.open(store=store, settings=NO_BG) as db:
            assert dict(db.scan()) == model


def test_two_compactors_the_older_is_fenced() -> None:
    with memory_store() as store:
        db = Db.open(store=store, settings=NO_BG)
        model = fill(db, 300)
        old = Compactor.open(store=store, options=OPTS)
        (spec, *_) = old.schedule()
        res = old.executor.execute(spec)
        new = Compactor.open(store=store, options=OPTS, takeover=True)
        assert new.epoch == old.epoch + 1  # type: ignore[operator]
        with pytest.raises(FencedError):
            old.commit(spec, res.ssts)
        with pytest.raises(FencedError):
            old.run_once()
        assert new.run_once().committed >= 1
        db.refresh_manifest()
        assert dict(db.scan()) == model
        db.close()
        # The fenced job's outputs are orphans: GC removes them, nothing referenced goes.
        gc = GarbageCollector.open(store=store)
        gc.run_once(min_age_s=0)
        with Db.open(store=store, settings=NO_BG) as db2:
            assert dict(db2.scan()) == model
            live = {s.id for s in db2.manifest.all_ssts()}
            listed = {paths.parse_sst_id(o.path) for o in store.list(paths.SST_DIR)}
            assert not {s.id for s in res.ssts} & listed
            assert live <= listed


def test_a_writer_flush_racing_a_commit_is_retried_not_lost() -> None:
    with memory_store() as store:
        db = Db.open(store=store, settings=NO_BG)
        model = fill(db, 300)
        c = Compactor.open(store=store, options=OPTS)
        (spec, *_) = c.schedule()
        res = c.executor.execute(spec)
        stale = c.manifest
        # The writer flushes a new L0 after the job was scheduled: the commit's first
        # CAS (on the stale version) loses and is re-applied to the writer's version.
        db.put(b"late", b"flush")
        db.flush(memtable=True)
        model[b"late"] = b"flush"
        m = c.commit(spec, res.ssts)
        assert stale is not None and m.id > stale.id + 1
        assert m.data.l0 and m.data.l0[0].first_key == b"late" == m.data.l0[0].last_key
        assert m.data.runs[0].ssts == res.ssts
        db.refresh_manifest()
        assert dict(db.scan()) == model
        db.close()
        with Db.open(store=store, settings=NO_BG) as db2:
            assert dict(db2.scan()) == model


class LeaseWatch(StoreWrapper):
    """Records job lease puts and deletes."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.events: list[tuple[str, str]] = []

    def put(self, path, data, *, create=False, attributes=None):  # type: ignore[no-untyped-def]
        if paths.parse_job_id(path):  # (not the compactor's role lease, kept until it closes)
            self.events.append(("put", path))
        return super().put(path, data, create=create, attributes=attributes)

    def delete(self, path):  # type: ignore[no-untyped-def]
        if paths.parse_job_id(path):
            self.events.append(("delete", path))
        return super().delete(path)

    def delete_many(self, names):  # type: ignore[no-untyped-def]
        self.events.extend(("delete", p) for p in names if paths.parse_job_id(p))
        return super().delete_many(names)


def test_each_job_holds_a_lease_until_its_commit() -> None:
    with memory_store() as inner:
        store = LeaseWatch(inner)
        db = Db.open(store=store, settings=NO_BG)
        fill(db, 300)
        c = Compactor.open(store=store, options=OPTS)
        seen_during_commit = []
        real_commit = c.commit

        def commit(spec, ssts):  # type: ignore[no-untyped-def]
            seen_during_commit.append(
                [o.path for o in inner.list(paths.JOB_DIR) if paths.parse_job_id(o.path)]
            )
            return real_commit(spec, ssts)

        c.commit = commit  # type: ignore[method-assign]
        report = c.run_once()
        assert report.committed >= 1
        assert all(len(x) == 1 for x in seen_during_commit)
        puts = [p for e, p in store.events if e == "put"]
        deletes = [p for e, p in store.events if e == "delete"]
        assert puts and set(puts) == set(deletes)
        c.close()
        assert not list(inner.list(paths.JOB_DIR))
        db.close()


def _until(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_embedded_compactor_pauses_for_a_standalone_one_and_resumes_when_it_closes() -> None:
    with memory_store() as store:
        settings = NO_BG.replace(compactor=OPTS)
        db = Db.open(store=store, settings=settings)
        (emb,) = [s for s in db._background if isinstance(s, EmbeddedCompactor)]
        model = fill(db, 200)
        _until(lambda: bool(db.manifest.data.runs), "the embedded compactor compacts on its own")
        standalone = Compactor.open(store=store, options=OPTS)
        model.update(fill(db, 200, tag=b"w"))
        _until(lambda: isinstance(emb.fenced, FencedError), "the embedded compactor is fenced")
        assert emb.alive  # paused, not stopped
        # An L0 stall now says why, and the way out if the standalone one died (it said nothing).
        assert db._host.compactor_paused
        hint = l0_stall_hint(db.manifest, embedded=True, paused=db._host.compactor_paused)
        assert f"compactor epoch {standalone.epoch} holds the role" in hint and "run-compactor --once" in hint
        db.put(b"after", b"fence")  # the writer is unaffected
        model[b"after"] = b"fence"
        assert standalone.run_once().aborted == 0
        epoch = standalone.epoch
        standalone.close()  # gives the role back
        # L0 grows again; the writer reads the release in the manifest of its next flush.
        model.update(fill(db, 200, tag=b"x"))
        _until(lambda: emb.fenced is None, "the embedded compactor resumes")
        assert not db._host.compactor_paused
        assert epoch is not None and db.manifest.compactor_epoch > epoch
        done = emb.totals.committed
        for i in range(OPTS.min_l0_ssts):  # enough new L0 SSTs for a job, whatever it merged already
            db.put(b"y%d" % i, b"v")
            model[b"y%d" % i] = b"v"
            db.flush(memtable=True)
        _until(lambda: emb.totals.committed > done, "and compacts again")
        db.refresh_manifest()
        assert dict(db.scan()) == model
        db.close()


class LeaseGate(StoreWrapper):
    """Holds the first job lease put (the compactor's job start) until ``go`` is set."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.held = threading.Event()
        self.go = threading.Event()

    def put(self, path, data, *, create=False, attributes=None):  # type: ignore[no-untyped-def]
        if path.startswith(paths.JOB_DIR) and not self.go.is_set():
            self.held.set()
            assert self.go.wait(30)
        return super().put(path, data, create=create, attributes=attributes)


def test_an_embedded_compactor_whose_writer_was_fenced_says_so_and_stops(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # It logged that it paused for "another compactor (compactor epoch 1)" -- its own epoch,
    # no compactor in sight -- and would resume when that one closed.
    with memory_store() as store:
        gate = LeaseGate(store)
        old = Db.open(store=gate, settings=NO_BG.replace(compactor=OPTS))
        (emb,) = [s for s in old._background if isinstance(s, EmbeddedCompactor)]
        fill(old, 200)
        assert gate.held.wait(30), "a compaction job starts"
        new = Db.open(store=store, settings=NO_BG)  # another writer: fences the old one
        with caplog.at_level("WARNING", logger="shaledb.compaction"):
            gate.go.set()  # the old writer's job goes on, and its commit meets the fence
            _until(lambda: not emb.alive, "the embedded compactor stops")
        assert emb.writer_fenced and isinstance(emb.fenced, FencedError)
        said = [r.getMessage() for r in caplog.records if r.name == "shaledb.compaction"]
        assert any("stops: its writer (writer epoch 1) was fenced by writer epoch 2" in m for m in said), said
        assert not any("another compactor" in m for m in said), said
        with pytest.raises(FencedError):
            old.put(b"k", b"v")
        old.close()
        new.close()


def test_a_released_role_stays_with_the_compactor_that_took_it_over() -> None:
    """Closing an older compactor after a newer one claimed releases nothing: the embedded
    compactor stays paused while the newer one runs."""
    with memory_store() as store:
        db = Db.open(store=store, settings=NO_BG.replace(compactor=OPTS))
        (emb,) = [s for s in db._background if isinstance(s, EmbeddedCompactor)]
        fill(db, 50)
        first = Compactor.open(store=store, options=OPTS)
        second = Compactor.open(store=store, options=OPTS, takeover=True)
        first.close()
        fill(db, 200, tag=b"w")
        _until(lambda: isinstance(emb.fenced, FencedError), "the embedded compactor is fenced")
        time.sleep(0.3)
        db.flush(memtable=True)
        assert emb.fenced is not None and db.manifest.option(OPT_COMPACTOR_RELEASED) is None
        second.close()
        fill(db, 50, tag=b"x")
        _until(lambda: emb.fenced is None, "it resumes once the holder closes")
        db.close()


def test_cli_run_compactor_once_and_gc_dry_run(tmp_path: Path) -> None:
    url = str(tmp_path / "db")
    db = Db.open(url, settings=NO_BG)
    model = fill(db, 300)
    db.close()
    buf, note = io.StringIO(), io.StringIO()
    with redirect_stdout(buf), redirect_stderr(note):
        assert main(["--path", url, "--json", "run-compactor", "--once"]) == 0
    report = json.loads(buf.getvalue())
    assert report["committed"] >= 1 and report["bytes_written"] > 0
    # The run gave the role back at exit: a writer's embedded compactor it fenced resumes.
    assert read_manifest(url).option(OPT_COMPACTOR_RELEASED) == str(read_manifest(url).compactor_epoch)
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["--path", url, "--json", "run-gc", "--dry-run", "--min-age", "0"]) == 0
    gc = json.loads(buf.getvalue())
    assert gc["dry_run"] and gc["counts"]["sst"] > 0 and gc["counts"]["manifest"] > 0
    # A dry run deleted nothing: every SST it listed is still there.
    for p in gc["deleted"]["sst"]:
        assert (tmp_path / "db" / p).exists()
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["--path", url, "run-gc", "--once", "--min-age", "0"]) == 0
    assert "deleted" in buf.getvalue()
    for p in gc["deleted"]["sst"]:
        assert not (tmp_path / "db" / p).exists()
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["--path", url, "read-manifest"]) == 0
    assert "1 sorted run," in buf.getvalue()
    with Db.open(url, settings=NO_BG) as db2:
        assert dict(db2.scan()) == model


def test_run_loop_stops_and_reports() -> None:
    with memory_store() as store:
        db = Db.open(store=store, settings=NO_BG)
        fill(db, 200)
        c = Compactor.open(store=store, options=OPTS)
        reports = []
        t = threading.Thread(target=c.run, kwargs={"on_report": reports.append})
        t.start()
        deadline = time.monotonic() + 30
        while not reports and time.monotonic() < deadline:
            time.sleep(0.01)
        c.stop()
        t.join(30)
        assert not t.is_alive() and reports and reports[0].committed >= 1
        db.close()


class Outage(StoreWrapper):
    """Every call fails with Unavailable while ``down`` (a store that stopped answering)."""

    down = False

    def _check(self) -> None:
        if self.down:
            raise Unavailable("test outage: the store is unreachable, retry later")

    def get(self, path):  # type: ignore[no-untyped-def]
        self._check()
        return super().get(path)

    def list(self, prefix, *, offset=None):  # type: ignore[no-untyped-def]
        self._check()
        return super().list(prefix, offset=offset)

    def put(self, path, data, *, create=False, attributes=None):  # type: ignore[no-untyped-def]
        self._check()
        return super().put(path, data, create=create, attributes=attributes)


def test_a_running_compactor_outlives_a_store_outage() -> None:
    """run() (and so `run-compactor`) ended with Unavailable when the store was out longer
    than the retry budget; it now logs and tries again at the next poll, as the embedded
    compactor does."""
    with memory_store() as store:
        db = Db.open(store=store, settings=NO_BG)
        fill(db, 100)
        flaky = Outage(store)
        c = Compactor.open(
            store=flaky, options=OPTS, settings=NO_BG.replace(retry=RetryOptions(max_attempts=1))
        )
        flaky.down = True
        t = threading.Thread(target=c.run, daemon=True)
        t.start()
        time.sleep(0.5)  # several failed passes
        assert t.is_alive()
        flaky.down = False
        _until(lambda: bool(db.refresh_manifest().data.runs), "it compacts once the store is back")
        c.stop()
        t.join(30)
        assert not t.is_alive()
        c.close()
        db.close()
