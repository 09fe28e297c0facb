"""The two-phase write: protocol steps, crash at every step, recovery, races across processes."""

from __future__ import annotations

import json
import random
import re
import sqlite3
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import google_crc32c
import pytest

from shaledb.errors import AlreadyExists, CorruptionError, ObjectNotFound, Unavailable
from shaledb.store import (
    TWO_PHASE_TMP_PREFIX,
    NoConditionalStore,
    ObjectStore,
    SqliteCasLog,
    TwoPhaseStore,
    drop_memory_store,
    open_store,
)
from shaledb.store.twophase import Record
from shaledb.testing import FaultInjectingStore, ManualClock, SimulatedCrash

PAYLOAD = b"manifest 7, writer epoch 3, nonce 5f1c"
DST = "manifest/00000000000000000007.manifest"
STEPS = ("tmp_written", "record_inserted", "copied", "committed", "tmp_deleted")
COMMITTED_STEPS = STEPS[1:]


@pytest.fixture(params=["memory", "local", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], ObjectStore]]:
    """A factory of fresh raw stores (without conditional writes) of one kind."""
    if request.param == "memory":
        names: list[str] = []

        def memory() -> ObjectStore:
            names.append(f"t-{uuid.uuid4().hex}")
            return open_store(f"memory://{names[-1]}", cas="none")

        yield memory
        for name in names:
            drop_memory_store(name)
    elif request.param == "local":
        counter = iter(range(1000))
        yield lambda: open_store(str(tmp_path / f"db{next(counter)}"), cas="none")
    else:
        factory = request.getfixturevalue("s3_url_factory")
        yield lambda: factory().open(cas="none")  # type: ignore[no-any-return]


def two_phase(inner: ObjectStore, db: Path, **kw: Any) -> TwoPhaseStore:
    return TwoPhaseStore(inner, SqliteCasLog(str(db)), rng=random.Random(99), **kw)


def raw_paths(inner: ObjectStore) -> list[str]:
    return [m.path for m in inner.list("")]


def test_protocol_steps(memory_store: ObjectStore, tmp_path: Path) -> None:
    faults = FaultInjectingStore(NoConditionalStore(memory_store), seed=1)
    steps: list[str] = []
    st = two_phase(faults, tmp_path / "cas.db", step_hook=lambda step, dst: steps.append(step))
    st.put(DST, PAYLOAD, create=True)
    assert steps == list(STEPS)
    ops = [(c.op, c.path) for c in faults.calls]
    tmp = ops[1][1]
    assert re.fullmatch(rf"{TWO_PHASE_TMP_PREFIX}[0-9a-f]{{32}}\.[0-9a-f]{{8}}", tmp)
    assert tmp.endswith(f".{google_crc32c.value(PAYLOAD):08x}")
    assert ops == [("head", DST), ("put", tmp), ("copy", DST), ("delete", tmp)]
    assert faults.calls[2].src == tmp
    assert raw_paths(memory_store) == [DST]
    assert st.log.get(st.namespace, DST) is not None
    assert st.log.pending(st.namespace) == []


def _check_outcome(inner: ObjectStore, db: Path, present: bool) -> None:
    """After a crash, every observer agrees on whether the write happened."""
    reader = two_phase(inner, db)
    if present:
        assert reader.get(DST) == PAYLOAD
        assert reader.head(DST).size == len(PAYLOAD)
        assert [m.path for m in reader.list("manifest/")] == [DST]
    else:
        with pytest.raises(ObjectNotFound):
            reader.get(DST)
        assert list(reader.list("manifest/")) == []
    writer = two_phase(inner, db)
    if present:
        with pytest.raises(AlreadyExists):
            writer.put(DST, b"a later writer", create=True)
    else:
        writer.put(DST, b"a later writer", create=True)
    assert writer.recover() == 0
    writer.sweep_orphans(min_age_s=0)
    assert [p for p in raw_paths(inner) if p.startswith("tmp/")] == []
    assert inner.get(DST) == (PAYLOAD if present else b"a later writer")


@pytest.mark.parametrize("step", STEPS)
def test_crash_after_each_step(step: str, backend: Callable[[], ObjectStore], tmp_path: Path) -> None:
    inner = backend()
    db = tmp_path / f"cas-{step}.db"

    def hook(at: str, dst: str) -> None:
        if at == step:
            raise SimulatedCrash(at)

    with pytest.raises(SimulatedCrash):
        two_phase(inner, db, step_hook=hook).put(DST, PAYLOAD, create=True)
    _check_outcome(inner, db, present=step in COMMITTED_STEPS)


def test_crash_at_every_store_call(backend: Callable[[], ObjectStore], tmp_path: Path) -> None:
    """Crash before and after each call the write makes; the insert decides."""
    recorder = FaultInjectingStore(backend(), seed=2)
    two_phase(recorder, tmp_path / "rec.db").put(DST, PAYLOAD, create=True)
    calls = recorder.calls
    assert [c.op for c in calls] == ["head", "put", "copy", "delete"]
    cases = 0
    for i, call in enumerate(calls):
        for action in ("crash", "apply_then_crash"):
            inner = backend()
            db = tmp_path / f"cas-{i}-{action}.db"
            faults = FaultInjectingStore(inner, seed=3)
            faults.add_rule(action, nth=i + 1)  # type: ignore[arg-type]
            with pytest.raises(SimulatedCrash):
                two_phase(faults, db).put(DST, PAYLOAD, create=True)
            # the record is inserted between the tmp put and the copy
            _check_outcome(inner, db, present=call.op in ("copy", "delete"))
            cases += 1
    assert cases == 8


def test_recover_completes_pending_writes(memory_store: ObjectStore, tmp_path: Path) -> None:
    inner = NoConditionalStore(memory_store)
    db = tmp_path / "cas.db"
    for n in range(3):

        def crash(step: str, dst: str) -> None:
            if step == "record_inserted":
                raise SimulatedCrash(step)

        with pytest.raises(SimulatedCrash):
            two_phase(inner, db, step_hook=crash).put(f"wal/{n}", b"w%d" % n, create=True)
    assert [p for p in raw_paths(inner) if not p.startswith("tmp/")] == []
    st = two_phase(inner, db)
    assert st.recover() == 3
    assert raw_paths(inner) == ["wal/0", "wal/1", "wal/2"]
    assert st.recover() == 0


def test_failed_copy_after_the_insert_still_succeeds(memory_store: ObjectStore, tmp_path: Path) -> None:
    faults = FaultInjectingStore(NoConditionalStore(memory_store), seed=4)
    faults.add_rule("fail_before", ops="copy")
    st = two_phase(faults, tmp_path / "cas.db")
    st.put(DST, PAYLOAD, create=True)  # durable at the insert: no error
    with pytest.raises(ObjectNotFound):
        memory_store.get(DST)
    faults.clear_rules()
    assert st.get(DST) == PAYLOAD  # the read rolls it forward


def test_insert_failure_is_unavailable_and_leaves_nothing(memory_store: ObjectStore, tmp_path: Path) -> None:
    st = two_phase(NoConditionalStore(memory_store), tmp_path / "cas.db")
    st.log.close()
    (tmp_path / "cas.db").unlink()
    (tmp_path / "cas.db").mkdir()  # the record database cannot be opened any more
    with pytest.raises(Unavailable, match="record database"):
        st.put(DST, PAYLOAD, create=True)
    assert raw_paths(memory_store) == []


def test_overwrite_does_not_lose_to_a_pending_write(memory_store: ObjectStore, tmp_path: Path) -> None:
    inner = NoConditionalStore(memory_store)
    db = tmp_path / "cas.db"

    def crash(step: str, dst: str) -> None:
        if step == "record_inserted":
            raise SimulatedCrash(step)

    with pytest.raises(SimulatedCrash):
        two_phase(inner, db, step_hook=crash).put(DST, PAYLOAD, create=True)
    st = two_phase(inner, db)
    st.put(DST, b"overwrite")
    st.recover()
    assert st.get(DST) == b"overwrite"


def test_delete_removes_the_claim(memory_store: ObjectStore, tmp_path: Path) -> None:
    inner = NoConditionalStore(memory_store)
    db = tmp_path / "cas.db"

    def crash(step: str, dst: str) -> None:
        if step == "record_inserted":
            raise SimulatedCrash(step)

    with pytest.raises(SimulatedCrash):
        two_phase(inner, db, step_hook=crash).put(DST, PAYLOAD, create=True)
    st = two_phase(inner, db)
    st.delete(DST)  # settles the pending write first, then deletes it
    assert st.recover() == 0
    with pytest.raises(ObjectNotFound):
        st.get(DST)
    st.put(DST, b"again", create=True)
    assert st.get(DST) == b"again"


def test_lost_temporary_object_is_corruption(memory_store: ObjectStore, tmp_path: Path) -> None:
    inner = NoConditionalStore(memory_store)
    db = tmp_path / "cas.db"

    def crash(step: str, dst: str) -> None:
        if step == "record_inserted":
            raise SimulatedCrash(step)

    with pytest.raises(SimulatedCrash):
        two_phase(inner, db, step_hook=crash).put(DST, PAYLOAD, create=True)
    for p in raw_paths(inner):
        inner.delete(p)  # e.g. a careless sweep of tmp/
    with pytest.raises(CorruptionError) as info:
        two_phase(inner, db).get(DST)
    assert info.value.path == DST


def test_sweep_orphans_respects_age(memory_store: ObjectStore, tmp_path: Path) -> None:
    inner = NoConditionalStore(memory_store)
    db = tmp_path / "cas.db"

    def crash(step: str, dst: str) -> None:
        if step == "tmp_written":
            raise SimulatedCrash(step)

    with pytest.raises(SimulatedCrash):
        two_phase(inner, db, step_hook=crash).put(DST, PAYLOAD, create=True)
    st = two_phase(inner, db)
    assert st.sweep_orphans(min_age_s=3600) == 0
    assert st.sweep_orphans(min_age_s=0) == 1
    assert raw_paths(inner) == []


def test_race_between_store_instances(memory_store: ObjectStore, tmp_path: Path) -> None:
    """16 writers, each with its own TwoPhaseStore and SQLite connection, one key at a time."""
    inner = NoConditionalStore(memory_store)
    db = tmp_path / "cas.db"
    stores = [TwoPhaseStore(inner, str(db), rng=random.Random(i)) for i in range(16)]
    for key in range(5):
        path = f"race/{key}"
        barrier = threading.Barrier(len(stores))
        won: list[int] = []

        def run(i: int, path: str = path, barrier: threading.Barrier = barrier, won: list[int] = won) -> None:
            barrier.wait()
            try:
                stores[i].put(path, b"writer %d" % i, create=True)
                won.append(i)
            except AlreadyExists:
                pass

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(stores))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(won) == 1
        assert inner.get(path) == b"writer %d" % won[0]
    for st in stores:
        st.close()
    assert [p for p in raw_paths(inner) if p.startswith("tmp/")] == []


_CHILD = textwrap.dedent(
    """
    import json, sys
    from shaledb.errors import AlreadyExists
    from shaledb.store import open_store
    root, cas, me, keys = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    st = open_store(root, cas=cas)
    won = []
    for k in range(keys):
        try:
            st.put(f"race/{k:03d}", f"process {me}".encode(), create=True)
            won.append(k)
        except AlreadyExists:
            pass
    print(json.dumps(won))
    """
)


def _hold_write_lock(path: Path) -> sqlite3.Connection:
    """A connection holding a write lock on a new file that is not yet in WAL mode.

    Opening the record database beside it is the case SQLite reports as
    "database is locked" at once, without waiting (it would deadlock)."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("CREATE TABLE other (x)")
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO other VALUES (1)")
    return conn


def test_opening_waits_out_a_lock_sqlite_will_not_wait_for(tmp_path: Path) -> None:
    holder = _hold_write_lock(tmp_path / "cas.db")
    release = threading.Timer(0.2, lambda: holder.execute("COMMIT"))
    release.start()
    log = SqliteCasLog(str(tmp_path / "cas.db"), busy_timeout_s=30)
    release.join()
    assert log.insert("ns", "a", "tmp/a", 0.0)
    assert log.get("ns", "a") == Record("a", "tmp/a", False)
    log.close()
    holder.close()


def test_opening_gives_up_after_the_busy_timeout(tmp_path: Path) -> None:
    holder = _hold_write_lock(tmp_path / "cas.db")
    clock = ManualClock()
    start = clock.monotonic()
    with pytest.raises(Unavailable, match="locked"):
        SqliteCasLog(str(tmp_path / "cas.db"), busy_timeout_s=5, clock=clock)
    assert 5 <= clock.monotonic() - start < 6
    holder.close()


def test_race_between_processes(tmp_path: Path) -> None:
    root, cas, keys = str(tmp_path / "db"), f"sqlite://{tmp_path / 'cas.db'}", 40
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, root, cas, str(me), str(keys)], stdout=subprocess.PIPE
        )
        for me in range(4)
    ]
    wins: dict[int, list[int]] = {}
    for me, p in enumerate(procs):
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        wins[me] = json.loads(out)
    st = open_store(root, cas=cas)
    for k in range(keys):
        owners = [me for me, won in wins.items() if k in won]
        assert len(owners) == 1, (k, owners)
        assert st.get(f"race/{k:03d}") == f"process {owners[0]}".encode()


def _iter_crashing_writes(inner: ObjectStore, db: Path, n: int, seed: int) -> Iterator[tuple[str, bool]]:
    """Writes that crash at a random step (seeded); yields (path, committed)."""
    rng = random.Random(seed)
    for i in range(n):
        step = rng.choice((*STEPS, None))
        path = f"wal/{i:05d}"

        def hook(at: str, dst: str, step: str | None = step) -> None:
            if at == step:
                raise SimulatedCrash(at)

        try:
            two_phase(inner, db, step_hook=hook).put(path, b"wal %d" % i, create=True)
        except SimulatedCrash:
            pass
        yield path, step is None or step in COMMITTED_STEPS


@pytest.mark.parametrize("seed", [7, 8], ids=lambda s: f"seed={s}")
def test_random_crashes_then_listing_shows_exactly_the_committed(
    seed: int, memory_store: ObjectStore, tmp_path: Path
) -> None:
    print(f"seed={seed}")
    inner = NoConditionalStore(memory_store)
    db = tmp_path / "cas.db"
    expected = [p for p, committed in _iter_crashing_writes(inner, db, 60, seed) if committed]
    st = two_phase(inner, db)
    assert [m.path for m in st.list("wal/")] == expected
    for p in expected:
        assert st.get(p) == b"wal %d" % int(p.split("/")[1])
