"""Ctrl-C (KeyboardInterrupt) during a durable write or a close: the handle goes on.

A durable ``put`` used to make its WAL object's PUT on the caller's thread, and a
KeyboardInterrupt raised there stopped the writer ("database stopped after a background
failure: KeyboardInterrupt"): a REPL or notebook user who pressed Ctrl-C had to reopen.
Now, where WAL PUTs are slow (a cloud store's round trip: ``wal.SLOW_PUT_S``), the main
thread (the only one Python raises KeyboardInterrupt in) leaves the PUT to the flusher and
only waits: the interrupt ends the wait, the write is not acknowledged and still becomes
durable, and the handle keeps writing. Where they are fast (a local directory, memory) the
main thread makes its own PUT, as a hand-off would double a durable put's time there, and
an interrupt landing in that PUT still stops the writer, typed and losing nothing
acknowledged. A close() cut short by Ctrl-C is finished by the next close().

The interrupts are delivered at exact points by a store wrapper (before the WAL PUT is
made, after it landed; during the close's L0 flush and its manifest write), not by
timing. One test sends a storm of real SIGINTs at a subprocess and checks invariants only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from array import array
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from shaledb import Db, DbReader, Settings
from shaledb.engine import wal
from shaledb.errors import ClosedError
from shaledb.store import ObjectStore, StoreWrapper, open_store
from shaledb.testing.seeds import test_seed

QUIET = Settings(compactor=None, garbage_collector=None, flush_interval_s=3600.0)

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="delivers SIGINT to the main thread")


@pytest.fixture(autouse=True)
def default_sigint() -> Iterator[None]:
    """Python's own SIGINT handler (KeyboardInterrupt in the main thread), whatever the
    test runner installed."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


class CtrlCAt(StoreWrapper):
    """Ctrl-C at the next PUT of an object under ``prefix``: ``before`` the PUT is made
    (nothing written) or ``after`` it landed.

    On the main thread the KeyboardInterrupt is raised right there, as a SIGINT would
    raise it. On any other thread a real SIGINT goes to the main thread, and this PUT waits
    until the main thread says it took the interrupt (``taken``): the interrupt lands while
    the main thread waits for this very PUT, whatever the machine's load.
    """

    def __init__(self, inner: ObjectStore, wal_put_s: float = 0.0) -> None:
        super().__init__(inner)
        self.wal_put_s = wal_put_s
        """Each WAL PUT takes at least this long (a cloud store's round trip)."""
        self.prefix = ""
        self.when = ""
        self.taken = threading.Event()
        self.fired = 0
        self.main_only = False

    def arm(self, prefix: str, when: str, *, main_only: bool = False) -> None:
        """At the next PUT under ``prefix`` (made by the main thread if ``main_only``)."""
        self.taken.clear()
        self.when = when
        self.main_only = main_only
        self.prefix = prefix

    def put(
        self,
        path: str,
        data: bytes | bytearray | memoryview,
        *,
        create: bool = False,
        attributes: Mapping[str, str] | None = None,
    ) -> None:
        when = ""
        mine = not self.main_only or threading.current_thread() is threading.main_thread()
        if self.prefix and path.startswith(self.prefix) and mine:
            when, self.prefix = self.when, ""
        if when == "before":
            self._ctrl_c()
        if self.wal_put_s and path.startswith("wal/"):
            time.sleep(self.wal_put_s)
        super().put(path, data, create=create, attributes=attributes)
        if when == "after":
            self._ctrl_c()

    def _ctrl_c(self) -> None:
        self.fired += 1
        main = threading.main_thread()
        if threading.current_thread() is main:
            raise KeyboardInterrupt
        assert main.ident is not None
        signal.pthread_kill(main.ident, signal.SIGINT)
        assert self.taken.wait(120), "the main thread never took the interrupt"


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("how", ["put", "batch", "delete"])
def test_ctrl_c_during_a_durable_write_leaves_the_writer_usable(tmp_path: Path, when: str, how: str) -> None:
    url = str(tmp_path / "db")
    store = CtrlCAt(open_store(url), wal_put_s=2 * wal.SLOW_PUT_S)  # PUTs as slow as a cloud's
    db = Db.open(store=store, settings=QUIET)
    db.put(b"a", b"1")
    db.put(b"z", b"0")
    store.arm("wal/", when)
    with pytest.raises(KeyboardInterrupt):
        if how == "batch":
            with db.batch() as b:
                b.put(b"b", b"2")
        elif how == "delete":
            db.delete(b"z")
        else:
            db.put(b"b", b"2")
    store.taken.set()
    assert store.fired == 1
    db.put(b"c", b"3")  # used to raise ClosedError: the writer had stopped
    db.delete(b"a")
    assert db.get_many([b"a", b"c"]) == [None, b"3"]
    db.close()
    with Db.open(url, settings=QUIET) as again:
        # the interrupted write was not acknowledged, and still became durable
        expect = {b"c": b"3"} if how == "delete" else {b"b": b"2", b"c": b"3", b"z": b"0"}
        assert dict(again.scan()) == expect


def test_ctrl_c_in_the_main_threads_own_put_on_a_fast_store_stops_the_writer_losing_nothing(
    tmp_path: Path,
) -> None:
    """A local directory: the main thread makes its own WAL PUT (a hand-off would double a
    durable put's time), and an interrupt landing in it stops the writer with a typed error
    naming it; nothing acknowledged is lost, and a reopen takes writes again."""
    url = str(tmp_path / "db")
    store = CtrlCAt(open_store(url))
    db = Db.open(store=store, settings=QUIET)
    db.put(b"a", b"1")
    store.arm("wal/", "before")
    with pytest.raises(KeyboardInterrupt):
        db.put(b"b", b"2")
    assert store.fired == 1
    with pytest.raises(ClosedError, match="KeyboardInterrupt"):
        db.put(b"c", b"3")
    db.close()
    with Db.open(url, settings=QUIET) as again:
        assert again.get(b"a") == b"1"
        again.put(b"c", b"3")
        assert again.get(b"c") == b"3"


class _SeqsCutShort(array):  # type: ignore[type-arg]
    """The WAL buffer's sequence column, whose next append is cut short by a Ctrl-C."""

    armed = True

    def append(self, value: int) -> None:
        if self.armed:
            self.armed = False  # (this instance's: the class stays armed for a rerun)
            raise KeyboardInterrupt
        super().append(value)


def test_ctrl_c_between_a_puts_wal_columns_gives_no_key_another_ones_value(tmp_path: Path) -> None:
    """White-box: the interrupt lands after the put's key went into the WAL buffer and
    before its sequence number did (between two calls, where Ctrl-C can land). The
    columns used to stay misaligned: the next WAL object paired ``b`` with ``c``'s value
    and lost ``c`` (a reader, and a recovery after a crash, replay it so)."""
    url = str(tmp_path / "db")
    db = Db.open(url, settings=QUIET)
    db.put(b"a", b"1")
    db.wal.seqs = _SeqsCutShort("Q")  # (the buffer is empty: its durable put cut it)
    with pytest.raises(KeyboardInterrupt):
        db.put(b"b", b"2")
    db.put(b"c", b"3")
    with DbReader.open(url) as reader:  # reads the WAL objects
        assert reader.get_many([b"a", b"b", b"c"]) == [b"1", None, b"3"]
    db.close()
    with Db.open(url, settings=QUIET) as again:  # b was applied (the memtable), not acknowledged
        assert dict(again.scan()) == {b"a": b"1", b"b": b"2", b"c": b"3"}


def test_ctrl_c_during_the_close_flush_is_finished_by_the_next_close(tmp_path: Path) -> None:
    """Ctrl-C while close() waits for the memtable's L0 SST: the second close() used to
    return at once and leave the handle half closed (``closed`` False, its threads running,
    the writer's claim held: reopening the database in this process was refused)."""
    url = str(tmp_path / "db")
    store = CtrlCAt(open_store(url))
    db = Db.open(store=store, settings=QUIET)
    for i in range(200):
        db.put(b"k%04d" % i, b"v", durable=False)
    store.arm("compacted/", "before")
    with pytest.raises(KeyboardInterrupt):
        db.close()
    store.taken.set()
    assert store.fired == 1
    assert not db.closed
    db.close()  # finishes the close
    assert db.closed
    with pytest.raises(ClosedError):
        db.put(b"after", b"1")
    with Db.open(url, settings=QUIET) as again:  # the writer's claim was given back
        assert sum(1 for _ in again.scan()) == 200


@pytest.mark.parametrize("when", ["before", "after"])
def test_ctrl_c_during_the_close_manifest_write_is_finished_by_the_next_close(
    tmp_path: Path, when: str
) -> None:
    """Ctrl-C while close() writes the manifest on the caller's thread (before the
    write, or after it landed): the next close() writes it again and finishes."""
    url = str(tmp_path / "db")
    store = CtrlCAt(open_store(url))
    db = Db.open(store=store, settings=QUIET)
    db.put(b"a", b"1")
    db.flush(memtable=True)  # the memtable's own manifest write happens now, not at close
    db.put(b"b", b"2")
    store.arm("manifest/", when, main_only=True)  # (the flusher's L0 manifest write is not it)
    with pytest.raises(KeyboardInterrupt):
        db.close()
    store.taken.set()
    assert store.fired == 1
    db.close()
    assert db.closed
    with pytest.raises(ClosedError):
        db.put(b"after", b"1")
    with Db.open(url, settings=QUIET) as again:
        assert dict(again.scan()) == {b"a": b"1", b"b": b"2"}
    db.close()  # a third close of a finished one returns


_STORM = r"""
import os, random, signal, sys, threading
import shaledb
url, seed, ops = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
print("seed", seed, flush=True)
rng = random.Random(seed)
settings = shaledb.Settings(compactor=None, garbage_collector=None, l0_sst_size_bytes=64 * 1024)
db = shaledb.Db.open(url, settings=settings)
stop, go = threading.Event(), threading.Event()

def ctrl_c():
    go.wait()  # (from inside the loop's try: an interrupt in start() would end the script)
    while not stop.wait(rng.uniform(0.0002, 0.003)):
        os.kill(os.getpid(), signal.SIGINT)

acked, interrupts, stray, i, failure = [], 0, 0, 0, ""
sender = threading.Thread(target=ctrl_c, daemon=True)
sender.start()
while True:
    try:  # (an interrupt in this loop's own bookkeeping is counted and the loop goes on)
        go.set()
        while i < ops:
            i += 1
            try:
                if i % 5 == 0:
                    keys = [b"b%08d-%02d" % (i, j) for j in range(20)]
                    db.write(shaledb.WriteBatch().put_many([(k, b"v" * 40) for k in keys]))
                    acked += keys
                else:
                    db.put(b"k%08d" % i, b"v" * 40)
                    acked.append(b"k%08d" % i)
            except KeyboardInterrupt:
                interrupts += 1
            except shaledb.ShaleError as exc:  # the writer stopped: say why, and end
                failure = f"{type(exc).__name__}: {exc}"
                i = ops
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        break
    except KeyboardInterrupt:
        stray += 1
stop.set()
sender.join()
state = "works"
if failure:
    state = "stopped"
else:
    try:
        db.put(b"final", b"1")
        acked.append(b"final")
    except shaledb.ShaleError as exc:
        state, failure = "stopped", f"{type(exc).__name__}: {exc}"
try:
    db.close()
except shaledb.ShaleError as exc:
    failure = failure or f"close: {type(exc).__name__}: {exc}"
with shaledb.Db.open(url) as again:
    missing = [k for k, v in zip(acked, again.get_many(acked)) if v is None]
print("interrupts", interrupts, "stray", stray, "acked", len(acked), flush=True)
print("state", state, failure, flush=True)
print("missing", len(missing), missing[:5], flush=True)
"""


def test_a_storm_of_real_sigints_loses_no_acknowledged_write(tmp_path: Path) -> None:
    """Real SIGINTs every 0.2-3 ms at a process making a fixed number of durable writes
    (puts and batches, through memtable freezes): each write raises KeyboardInterrupt or is
    acknowledged. Invariants only, whatever the load: every acknowledged write is there
    on reopen, and the writer still works -- or, if an interrupt landed where nothing can
    be repaired (a second one inside the handler that undoes a half-appended WAL entry),
    it stopped with a typed error that names KeyboardInterrupt."""
    seed = test_seed()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        [sys.executable, "-c", _STORM, str(tmp_path / "db"), str(seed), "1500"],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    out = proc.stdout
    assert proc.returncode == 0, (out, proc.stderr[-3000:])
    lines = {line.split(" ", 1)[0]: line for line in out.splitlines()}
    print(lines["interrupts"], "|", lines["state"])
    assert lines["missing"] == "missing 0 []", (out, proc.stderr[-3000:])
    state = lines["state"].split(" ", 2)
    assert state[1] == "works" or (state[1] == "stopped" and "KeyboardInterrupt" in state[2]), (
        out,
        proc.stderr[-3000:],
    )


@pytest.mark.parametrize("thread", ["shaledb-wal", "shaledb-flush", "shaledb-compactor", "shaledb-gc"])
def test_ctrl_c_while_an_open_starts_a_thread_leaves_no_thread_running(
    tmp_path: Path, thread: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C during ``Db.open`` that landed while a writer thread was starting (the wait in
    ``Thread.start()``) left that thread running -- and, from the WAL writer on, every one
    the open had started -- in a handle the caller never got: a GC pass every interval
    against the store for the rest of the process. Now the interrupt is held back for the
    start, and the open stops every thread it started before raising it."""
    url = str(tmp_path / "db")
    with Db.open(url) as db:
        db.put(b"k", b"v")
    start = threading.Thread.start

    def start_then_ctrl_c(self: threading.Thread) -> None:
        start(self)
        if self.name == thread:
            signal.raise_signal(signal.SIGINT)  # a real SIGINT, right after the thread began

    monkeypatch.setattr(threading.Thread, "start", start_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        Db.open(url)
    monkeypatch.undo()
    for t in threading.enumerate():
        if t.name in ("shaledb-wal", "shaledb-flush", "shaledb-compactor", "shaledb-gc"):
            t.join(60)
            assert not t.is_alive(), f"{t.name} still running after the interrupted open"
    with Db.open(url) as db:
        assert db.get(b"k") == b"v"


def test_ctrl_c_while_a_reader_starts_its_poll_thread_leaves_no_thread_nor_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same for ``DbReader.open``: its poll thread kept running, refreshing the reader's
    checkpoint at half-life for the rest of the process, so the garbage collector never
    freed what that checkpoint pinned."""
    from shaledb import admin

    url = str(tmp_path / "db")
    with Db.open(url, settings=QUIET) as db:
        db.put(b"k", b"v")
    start = threading.Thread.start

    def start_then_ctrl_c(self: threading.Thread) -> None:
        start(self)
        if self.name == "shaledb-reader":
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(threading.Thread, "start", start_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        DbReader.open(url)
    monkeypatch.undo()
    for t in threading.enumerate():
        if t.name == "shaledb-reader":
            t.join(60)
            assert not t.is_alive(), "the interrupted reader's poll thread is still running"
    assert [c for c in admin.list_checkpoints(url) if dict(c.metadata).get("role") == "reader"] == []
    with DbReader.open(url) as reader:
        assert reader.get(b"k") == b"v"
