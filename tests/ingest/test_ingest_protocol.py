"""Bulk ingest end to end without Spark: placement, ordering, idempotence, GC, fencing."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Mapping

import pytest
from ingest_kit import QUIET, contents, latest, sorted_kv

from shaledb import Compactor, Db, FencedError, GarbageCollector, GcOptions, RetryOptions, Settings, admin
from shaledb.bulk.ingest import (
    INGEST_HISTORY,
    IngestConflict,
    IngestFenced,
    abort_ingest,
    begin_ingest,
    commit_ingest,
    ingest_columns,
    write_part,
)
from shaledb.compaction import schedule
from shaledb.errors import DatabaseDestroyed, NotFound, Unavailable
from shaledb.format import paths
from shaledb.format.bloom import BLAKE2B, WORDMIX
from shaledb.format.sst import decode_sst
from shaledb.settings import CompactorOptions
from shaledb.store import ObjectStore, StoreWrapper, open_store
from shaledb.store.base import ObjectMeta
from shaledb.testing.faults import FaultInjectingStore
from shaledb.testing.seeds import test_seed

NO_RETRY = RetryOptions(max_attempts=1, initial_backoff_s=0.001, max_backoff_s=0.001, timeout_s=30.0)
RETRY = RetryOptions(max_attempts=3, initial_backoff_s=0.001, max_backoff_s=0.002, timeout_s=30.0)


@pytest.fixture
def url(tmp_path):
    return str(tmp_path / "db")


def two_parts(url, plan, keys, vals, cut):
    st = open_store(url)
    return [
        write_part(st, plan, 0, keys[:cut], vals[:cut]),
        write_part(st, plan, 1, keys[cut:], vals[cut:]),
    ]


def test_ingest_into_a_new_database_is_one_settled_run(url):
    seed = test_seed()
    keys, vals = sorted_kv(3000, random.Random(seed))
    plan = begin_ingest(url, ingest_id="first")
    res = commit_ingest(plan, two_parts(url, plan, keys, vals, 1200), url)
    assert res.placement == "run" and res.rows == 3000 and not res.noop
    m = latest(url)
    assert m.data.l0 == () and len(m.data.runs) == 1 and len(m.data.runs[0].ssts) == 2
    assert schedule(m, CompactorOptions()) == []  # needs no further compaction
    assert m.ingests[-1].id == "first" and m.ingests[-1].rows == 3000
    assert contents(url) == dict(zip(keys, vals))
    assert list(open_store(url).list("compactions/")) == []  # the lease is gone


def test_the_commit_line_reads_as_english_with_a_size_people_read(url):
    """The line Spark users see on stderr: "1 row in 1 SST (312 B)", not "1 rows in 1 SSTs (312 bytes)"."""
    plan = begin_ingest(url, ingest_id="one")
    res = commit_ingest(plan, [write_part(open_store(url), plan, 0, [b"k"], [b"v"])], url)
    line = res.describe()
    assert line.startswith("ingest one: 1 row in 1 SST (") and line.split("(")[1].split(")")[0].endswith(" B")
    plan = begin_ingest(url, ingest_id="many")
    keys, vals = sorted_kv(3000, random.Random(test_seed()))
    res = commit_ingest(plan, two_parts(url, plan, [b"z" + k for k in keys], vals, 1200), url)
    assert " 3,000 rows in 2 SSTs (" in res.describe() and " KiB) " in res.describe()


def test_claim_orders_the_ingest_after_earlier_writes_and_before_later_ones(url):
    with Db.open(url, settings=QUIET) as db:
        db.put(b"k1", b"old")
        db.put(b"k2", b"old")
        db.flush(memtable=True)
        db.put(b"k3", b"only in the WAL")  # replayed and flushed by begin
        db.put(b"k4", b"old, WAL")
    res = ingest_columns(url, [b"k1", b"k3", b"k5"], [b"new", b"new", b"new"])
    assert res.placement == "l0"  # the L0 SSTs holding k1..k4 overlap the ingest
    assert contents(url) == {b"k1": b"new", b"k2": b"old", b"k3": b"new", b"k4": b"old, WAL", b"k5": b"new"}
    with Db.open(url, settings=QUIET) as db:
        assert db.stats()["seq"] >= res.seq
        db.put(b"k1", b"after")
        assert db.get(b"k1") == b"after"
        with db.snapshot() as snap:
            assert snap.get(b"k5") == b"new"  # the ingest's seq is below the writer's
    with Db.open(url, settings=QUIET) as db:
        assert db.get(b"k1") == b"after" and db.get(b"k3") == b"new"


def test_an_ingest_above_disjoint_l0_data_is_a_sorted_run_on_top(url):
    with Db.open(url, settings=QUIET) as db:
        db.put(b"a", b"1")
        db.flush(memtable=True)
    ingest_columns(url, [b"m", b"n"], [b"x", b"y"], ingest_id="one")
    res = ingest_columns(url, [b"n", b"o"], [b"z", b"w"], ingest_id="two")
    assert res.placement == "run"
    m = latest(url)
    assert [r.id for r in m.data.runs] == [*res.run_ids, m.data.runs[1].id]
    assert contents(url) == {b"a": b"1", b"m": b"x", b"n": b"z", b"o": b"w"}
    c = Compactor.open(url, CompactorOptions(min_l0_ssts=1, max_space_amplification=0.01))
    c.run_once()
    assert contents(url) == {b"a": b"1", b"m": b"x", b"n": b"z", b"o": b"w"}


def test_behind_loads_data_older_than_everything_without_fencing(url):
    db = Db.open(url, settings=QUIET)
    try:
        db.put(b"b", b"live")
        db.flush(memtable=True)
        db.put(b"c", b"live, in the memtable")
        res = ingest_columns(url, [b"a", b"b", b"c"], [b"old", b"old", b"old"], behind=True)
        assert res.placement == "bottom" and res.seq == 0
        db.put(b"d", b"still the writer")  # not fenced
        db.refresh_manifest()  # (the writer polls for other processes' changes)
        assert db.get(b"a") == b"old"
        assert db.get(b"b") == b"live" and db.get(b"c") == b"live, in the memtable"
    finally:
        db.close()
    want = {b"a": b"old", b"b": b"live", b"c": b"live, in the memtable", b"d": b"still the writer"}
    assert contents(url) == want
    assert latest(url).data.runs[-1].id in res.run_ids


@pytest.mark.spark  # numpy: the ingest writes version-2 filters only with it; no JVM
def test_lookups_pass_filters_of_both_versions(url):
    """Flushed SSTs have BLAKE2b filters, ingested ones wordmix filters: a lookup that
    passes one of each must hash the key for each (a hash cached across versions
    would make the second filter deny keys it holds)."""
    pytest.importorskip("numpy")
    pytest.importorskip("pyarrow")
    keys = [b"k%04d" % i for i in range(400)]
    with Db.open(url, settings=QUIET) as db:
        for k in keys[::2]:
            db.put(k, b"flushed")
        db.flush(memtable=True)  # one L0 spanning every key
        ingest_columns(url, keys[1::2], [b"ingested"] * 200, behind=True)
        db.refresh_manifest()
        st = open_store(url)
        m = latest(url)
        versions = set()
        for s in m.data.ssts():
            meta, _ = decode_sst(st.get(f"compacted/{s.id}.sst"))
            assert meta.bloom is not None
            versions.add(meta.bloom.version)
        assert versions == {BLAKE2B, WORDMIX}
        assert [db.get(k) for k in keys] == [b"flushed", b"ingested"] * 200
        assert db.get(b"k9999") is None


def test_committing_the_same_id_twice_is_a_noop(url):
    keys, vals = sorted_kv(500, random.Random(3))
    plan = begin_ingest(url, ingest_id="job-1")
    parts = two_parts(url, plan, keys, vals, 100)
    first = commit_ingest(plan, parts, url)
    second = commit_ingest(plan, parts, url)
    assert second.noop and second.manifest_id == first.manifest_id
    # A whole re-run: begin recognizes the id, writes nothing, commit does nothing.
    plan2 = begin_ingest(url, ingest_id="job-1")
    assert plan2.committed_manifest == first.manifest_id and plan2.lease_id is None
    parts2 = two_parts(url, plan2, keys, vals, 400)
    assert all(p.ssts == () for p in parts2)
    assert commit_ingest(plan2, parts2, url).noop
    m = latest(url)
    assert sum(len(r.ssts) for r in m.data.runs) == 2 and m.data.l0 == ()
    assert contents(url) == dict(zip(keys, vals))


def test_a_rerun_with_other_rows_under_the_same_id_is_refused(url):
    plan = begin_ingest(url, ingest_id="job-2")
    commit_ingest(plan, [write_part(open_store(url), plan, 0, [b"a"], [b"1"])], url)
    plan2 = begin_ingest(url, ingest_id="job-2")
    with pytest.raises(IngestConflict, match="other rows"):
        commit_ingest(plan2, [write_part(open_store(url), plan2, 0, [b"a"], [b"2"])], url)
    assert contents(url) == {b"a": b"1"}


def test_a_concurrent_rerun_commits_once_and_deletes_its_copies(url):
    plan_a = begin_ingest(url, ingest_id="same", behind=True)
    plan_b = begin_ingest(url, ingest_id="same", behind=True)
    st = open_store(url)
    pa_ = [write_part(st, plan_a, 0, [b"a", b"b"], [b"1", b"2"])]
    pb_ = [write_part(st, plan_b, 0, [b"a", b"b"], [b"1", b"2"])]
    assert not commit_ingest(plan_a, pa_, url).noop
    assert commit_ingest(plan_b, pb_, url).noop
    listed = {m.path for m in st.list("compacted/")}
    assert all(f"compacted/{s.id}.sst" not in listed for s in pb_[0].ssts)


def test_history_is_bounded(url):
    for i in range(INGEST_HISTORY + 3):
        ingest_columns(url, [b"k%03d" % i], [b"v"], ingest_id=f"id-{i}", behind=True)
    ids = [g.id for g in latest(url).ingests]
    assert len(ids) == INGEST_HISTORY and ids[-1] == f"id-{INGEST_HISTORY + 2}" and "id-0" not in ids


def test_a_speculative_duplicate_of_a_partition_is_committed_once(url):
    plan = begin_ingest(url)
    st = open_store(url)
    a = write_part(st, plan, 0, [b"a", b"b"], [b"1", b"2"], attempt="0")
    b = write_part(st, plan, 0, [b"a", b"b"], [b"1", b"2"], attempt="1 (speculative)")
    c = write_part(st, plan, 1, [b"c"], [b"3"])
    res = commit_ingest(plan, [a, b, c], url)
    assert res.rows == 3 and res.ssts == 2
    referenced = {s.id for s in latest(url).all_ssts()}
    assert {s.id for s in a.ssts} <= referenced and not {s.id for s in b.ssts} & referenced
    gc = GarbageCollector.open(url, GcOptions(min_age_s=0))
    gone = gc.run_once().deleted["sst"]
    assert [p.split("/")[1][:-4] for p in gone] == [s.id for s in b.ssts]
    assert contents(url) == {b"a": b"1", b"b": b"2", b"c": b"3"}


def test_the_lease_keeps_gc_off_uncommitted_ssts_until_the_commit(url):
    ingest_columns(url, [b"x"], [b"0"])  # the database exists
    plan = begin_ingest(url)
    st = open_store(url)
    part = write_part(st, plan, 0, [b"a"], [b"1"])
    dead = write_part(st, plan, 1, [b"b"], [b"2"], attempt="failed attempt")
    gc = GarbageCollector.open(url, GcOptions(min_age_s=0))
    assert gc.run_once().deleted["sst"] == []
    commit_ingest(plan, [part], url)
    gone = gc.run_once().deleted["sst"]
    assert gone == [f"compacted/{dead.ssts[0].id}.sst"]
    assert contents(url) == {b"x": b"0", b"a": b"1"}


def test_abort_deletes_outputs_and_the_lease(url):
    Db.open(url, settings=QUIET).close()  # there before the ingest: its abort keeps the database
    plan = begin_ingest(url)
    st = open_store(url)
    part = write_part(st, plan, 0, [b"a"], [b"1"])
    before = latest(url)
    assert abort_ingest(plan, [part, None], url) == 1
    assert list(st.list("compacted/")) == [] and list(st.list("compactions/")) == []
    assert latest(url).data == before.data
    with pytest.raises(Exception, match="failed"):
        commit_ingest(plan, [part, None], url)


@pytest.mark.parametrize("name", ["db", "50%25 done"])
def test_a_dropped_first_ingest_leaves_no_folders_in_a_local_directory(tmp_path, name):
    """The drop deleted the objects and then removed the emptied folders by parsing the store's
    description as a URL, which missed a directory whose name has a ``%`` (``%25`` read as
    ``%``): ``manifest/``, ``wal/`` ... stayed. The local store removes them itself now."""
    root = tmp_path / name
    url = str(root)
    plan = begin_ingest(url)
    assert plan.created_epoch is not None
    abort_ingest(plan, [write_part(open_store(url), plan, 0, [b"a"], [b"1"])], url)
    assert list(root.iterdir()) == []


def test_abort_of_the_ingest_that_created_the_database_deletes_it_unless_it_was_used_since(url):
    """A failed first ingest leaves nothing at the URL (a retry or a read then finds no database,
    not an empty one); a database someone else opened, read or wrote meanwhile stays."""
    st = open_store(url)
    plan = begin_ingest(url)
    assert plan.created_epoch is not None
    part = write_part(st, plan, 0, [b"a"], [b"1"])
    assert abort_ingest(plan, [part], url) == 1
    with pytest.raises(NotFound, match="no database at"):
        admin.read_manifest(url)
    assert list(st.list("")) == []
    plan = begin_ingest(url)  # the retry creates it afresh and commits
    commit_ingest(plan, [write_part(st, plan, 0, [b"a"], [b"1"])], url)
    assert contents(url) == {b"a": b"1"}
    assert begin_ingest(url).created_epoch is None  # there before: an abort keeps it

    kept = {}
    for what in ("writer", "checkpoint", "committed"):
        where = f"{url}-{what}"
        plan = begin_ingest(where)
        if what == "writer":  # a writer opened it after the ingest's begin
            Db.open(where, settings=QUIET).close()
        elif what == "checkpoint":  # a reader pinned it
            admin.create_checkpoint(where, lifetime=60.0)
        else:  # the commit landed, and Spark calls abort() after a commit that raised
            commit_ingest(plan, [write_part(open_store(where), plan, 0, [b"a"], [b"1"])], where)
        abort_ingest(plan, [], where)
        kept[what] = latest(where).destroyed_at_s is None
    assert kept == {"writer": True, "checkpoint": True, "committed": True}


@pytest.mark.parametrize("retry", [NO_RETRY, RETRY], ids=["commit-fails", "commit-retries"])
def test_a_commit_whose_manifest_write_landed_but_failed_keeps_its_data_through_abort(url, retry):
    """The ambiguous case: the CAS landed and its response was lost. Without retries the
    commit raises and Spark calls abort(), which must not delete what the manifest now
    references; with retries the commit finds its own record and succeeds."""
    seed = test_seed()
    keys, vals = sorted_kv(500, random.Random(seed))
    plan = begin_ingest(url, ingest_id="ambiguous")
    parts = two_parts(url, plan, keys, vals, 200)
    faulty = FaultInjectingStore(open_store(url), seed=seed)
    rule = faulty.add_rule("apply_then_fail", ops="create", path_prefix=paths.MANIFEST_DIR, times=1)
    if retry is NO_RETRY:
        with pytest.raises(Unavailable):
            commit_ingest(plan, parts, store=faulty, settings=Settings(retry=retry))
        assert abort_ingest(plan, parts, url) == 0
    else:
        res = commit_ingest(plan, parts, store=faulty, settings=Settings(retry=retry))
        assert res.rows == 500 and res.manifest_id == latest(url).ingests[-1].manifest_id
    assert rule.applied == 1 and latest(url).ingests[-1].id == "ambiguous"
    assert contents(url) == dict(zip(keys, vals))
    assert abort_ingest(plan, parts, url) == 0  # a late abort of a committed ingest deletes nothing
    assert contents(url) == dict(zip(keys, vals))


def test_abort_deletes_nothing_while_the_manifest_cannot_be_read(url):
    plan = begin_ingest(url)
    st = open_store(url)
    part = write_part(st, plan, 0, [b"a"], [b"1"])
    faulty = FaultInjectingStore(st, seed=test_seed())
    faulty.add_rule("fail_before", ops="read", path_prefix=paths.MANIFEST_DIR)
    assert abort_ingest(plan, [part], store=faulty, settings=Settings(retry=NO_RETRY)) == 0
    assert [m.path for m in st.list("compacted/")] == [paths.sst_path(part.ssts[0].id)]
    assert list(st.list("compactions/")) == []  # the lease is dropped all the same


def test_a_writer_that_opens_after_begin_makes_the_commit_fail(url):
    ingest_columns(url, [b"a"], [b"before"])
    plan = begin_ingest(url, ingest_id="late")
    part = write_part(open_store(url), plan, 0, [b"a"], [b"ingest"])
    with Db.open(url, settings=QUIET) as db:
        db.put(b"a", b"writer")
    before = latest(url)
    with pytest.raises(IngestFenced, match="a writer or another ingest opened the database"):
        commit_ingest(plan, [part], url)
    after = latest(url)
    assert after.data == before.data and all(g.id != "late" for g in after.ingests)
    assert contents(url) == {b"a": b"writer"}


def test_begin_fences_a_live_writer_in_this_process(url):
    db = Db.open(url, settings=QUIET)
    db.put(b"acked", b"1")
    plan = begin_ingest(url)
    with pytest.raises(FencedError, match="took over"):
        db.put(b"after", b"2")
    db.close()
    res = commit_ingest(plan, [write_part(open_store(url), plan, 0, [b"z"], [b"9"])], url)
    assert res.placement == "run"  # the L0 SST holding "acked" does not overlap "z"
    assert contents(url) == {b"acked": b"1", b"z": b"9"}


def test_missing_or_destroyed_databases(url, tmp_path):
    with pytest.raises(NotFound):
        begin_ingest(str(tmp_path / "nothing"), create_if_missing=False)
    ingest_columns(url, [b"a"], [b"1"])
    from shaledb import admin

    admin.destroy(url, soft=True)
    with pytest.raises(DatabaseDestroyed):
        begin_ingest(url, behind=True)


def test_a_gc_that_took_an_sst_before_the_commit_is_reported(url):
    ingest_columns(url, [b"x"], [b"0"])
    plan = begin_ingest(url)
    st = open_store(url)
    part = write_part(st, plan, 0, [b"a"], [b"1"])
    st.delete(f"compacted/{part.ssts[0].id}.sst")
    with pytest.raises(NotFound, match="is gone"):
        commit_ingest(plan, [part], url)
    assert contents(url) == {b"x": b"0"}


def test_the_commit_checks_the_parts_outputs_several_at_a_time(url):
    """One HEAD per output SST: they went one after another (a round trip each on S3)."""
    import threading
    import time

    from shaledb.store import StoreWrapper

    class Gauge(StoreWrapper):
        def __init__(self, inner):
            super().__init__(inner)
            self.lock, self.now, self.most, self.heads = threading.Lock(), 0, 0, 0

        def head(self, path):
            with self.lock:
                self.now += 1
                self.heads += 1
                self.most = max(self.most, self.now)
            try:
                time.sleep(0.01)
                return self.inner.head(path)
            finally:
                with self.lock:
                    self.now -= 1

    ingest_columns(url, [b"x"], [b"0"])
    st = Gauge(open_store(url))
    plan = begin_ingest(url, store=st)
    parts = [write_part(st, plan, i, [b"p%02d" % i], [b"v"]) for i in range(24)]
    commit_ingest(plan, parts, store=st)
    assert st.heads == 24 and st.most > 1
    assert contents(url)[b"p07"] == b"v"


class _ManifestReads(StoreWrapper):
    """Counts reads of the manifest (a LIST of ``manifest/`` and a GET of a version); ``after_read``
    runs once, after the first GET of a version: another process's write landing right then."""

    def __init__(self, inner: ObjectStore, after_read: Callable[[], None] | None = None) -> None:
        super().__init__(inner)
        self.lists = self.gets = 0
        self.after_read = after_read

    def list(self, prefix: str, *, offset: str | None = None) -> Iterator[ObjectMeta]:
        if prefix == paths.MANIFEST_DIR and offset is None:
            self.lists += 1
        return self.inner.list(prefix, offset=offset)

    def get(self, path: str) -> bytes:
        data = self.inner.get(path)
        if path.startswith(paths.MANIFEST_DIR):
            self.gets += 1
            hook, self.after_read = self.after_read, None
            if hook is not None:
                hook()
        return data


def test_begin_reads_the_manifest_once(url):
    """begin read the latest manifest for its checks, then the claim's writer open read it again:
    on S3 two more requests (LIST and GET) per Spark write. The claim now starts from begin's
    read; its CAS is what keeps that safe (next test)."""
    with Db.open(url, settings=QUIET) as db:
        db.put(b"a", b"1")
    st = _ManifestReads(open_store(url))
    plan = begin_ingest(store=st)
    assert plan.writer_epoch is not None
    assert (st.gets, st.lists) == (1, 2)  # was (2, 3); the other LIST is the open's check after its fence
    commit_ingest(plan, [write_part(open_store(url), plan, 0, [b"b"], [b"2"])], url)
    assert contents(url) == {b"a": b"1", b"b": b"2"}


def test_a_writer_that_opens_between_begin_s_read_and_its_claim_is_fenced_by_the_claim(url):
    """The version begin read is only the claim's first attempt: a writer that opened right after
    that read wrote a newer version, so the claim's create-if-absent conflicts, re-reads and
    claims above it, and that writer is fenced."""
    with Db.open(url, settings=QUIET) as db:
        db.put(b"a", b"1")
    other: list[Db] = []
    st = _ManifestReads(open_store(url), after_read=lambda: other.append(Db.open(url, settings=QUIET)))
    plan = begin_ingest(store=st)
    assert other and plan.writer_epoch == other[0].epoch + 1 == latest(url).writer_epoch
    with pytest.raises(FencedError):
        other[0].put(b"late", b"x", durable=True)
    other[0].close()
    commit_ingest(plan, [write_part(open_store(url), plan, 0, [b"b"], [b"2"])], url)
    assert contents(url) == {b"a": b"1", b"b": b"2"}


class _AfterFence(StoreWrapper):
    """Runs ``hook`` once, right after the first WAL object written through it lands (an
    opening writer's fence: its claim is in the manifest, its re-read comes next)."""

    def __init__(self, inner: ObjectStore, hook: Callable[[], None]) -> None:
        super().__init__(inner)
        self.hook: Callable[[], None] | None = hook

    def put(
        self,
        path: str,
        data: bytes | bytearray | memoryview,
        *,
        create: bool = False,
        attributes: Mapping[str, str] | None = None,
    ) -> None:
        self.inner.put(path, data, create=create, attributes=attributes)
        if path.startswith(paths.WAL_DIR):
            hook, self.hook = self.hook, None
            if hook is not None:
                hook()


def test_a_claim_overtaken_while_begin_opens_fails_as_an_ingest_naming_the_race(url):
    """Two jobs writing one database at once (a stream's micro-batch and a batch write): the
    second claim lands right after the first's. The first used to fail with the writer's words,
    "FencedError: writer epoch 4 took over while this writer (epoch 3) opened" (no writer was
    started), from Spark's writer(); now IngestFenced, saying what happened and that nothing was
    written."""
    ingest_columns(url, [b"a"], [b"before"])
    st = _AfterFence(open_store(url), lambda: begin_ingest(url, ingest_id="second"))
    with pytest.raises(IngestFenced, match="another ingest claimed the database while this ingest") as exc:
        begin_ingest(store=st, ingest_id="first")
    assert "nothing was written" in str(exc.value) and "took over" in str(exc.value)
    assert contents(url) == {b"a": b"before"}
    assert [g.id for g in latest(url).ingests if g.id in ("first", "second")] == []
