"""Ctrl-C during a durable write: the write raises KeyboardInterrupt, the handle goes on.

A durable ``put`` makes its WAL object's PUT on the caller's thread; a KeyboardInterrupt
raised there used to stop the writer ("database stopped after a background failure:
KeyboardInterrupt"), so a REPL or notebook user who pressed Ctrl-C had to reopen. Now the
flusher thread finishes the interrupted PUT and the handle keeps writing; every
acknowledged write is there on reopen.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from shaledb import Db, Settings
from shaledb.store import StoreWrapper, open_store

QUIET = Settings(compactor=None, garbage_collector=None)


class InterruptOnce(StoreWrapper):
    """Raises KeyboardInterrupt at the next WAL object's create, as a Ctrl-C would:
    ``before`` the PUT is made (nothing written) or after it (the object landed)."""

    armed = ""

    def put(
        self,
        path: str,
        data: bytes | bytearray | memoryview,
        *,
        create: bool = False,
        attributes: Mapping[str, str] | None = None,
    ) -> None:
        when, self.armed = (self.armed, "") if path.startswith("wal/") else ("", self.armed)
        if when == "before":
            raise KeyboardInterrupt
        super().put(path, data, create=create, attributes=attributes)
        if when == "after":
            raise KeyboardInterrupt


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("batch", [False, True], ids=["put", "write"])
def test_an_interrupted_durable_write_leaves_the_writer_usable(
    tmp_path: Path, when: str, batch: bool
) -> None:
    url = str(tmp_path / "db")
    store = InterruptOnce(open_store(url))
    db = Db.open(store=store, settings=QUIET)
    db.put(b"a", b"1")
    store.armed = when
    with pytest.raises(KeyboardInterrupt):
        if batch:
            with db.batch() as b:
                b.put(b"b", b"2")
        else:
            db.put(b"b", b"2")
    db.put(b"c", b"3")  # used to raise ClosedError: the writer had stopped
    db.delete(b"a")
    db.close()
    with Db.open(url, settings=QUIET) as again:
        # b's outcome was unknown when it raised; the flusher finished its PUT
        assert again.get_many([b"a", b"b", b"c"]) == [None, b"2", b"3"]


_SCRIPT = """
import os, random, signal, sys, threading, time
import shaledb
url, seed = sys.argv[1], int(sys.argv[2])
print("seed", seed, flush=True)
rng = random.Random(seed)
db = shaledb.Db.open(url, settings=shaledb.Settings(compactor=None, garbage_collector=None))
stop = threading.Event()
def ctrl_c():
    while not stop.wait(rng.uniform(0.0005, 0.003)):
        os.kill(os.getpid(), signal.SIGINT)
threading.Thread(target=ctrl_c, daemon=True).start()
acked, interrupts, i = [], 0, 0
while interrupts < 40 and i < 2_000_000:
    i += 1
    try:
        if i % 4:
            db.put(b"k%08d" % i, b"v")
            acked.append(b"k%08d" % i)
        else:
            db.write(shaledb.WriteBatch().put_many([(b"k%08d-%d" % (i, j), b"v") for j in range(20)]))
            acked += [b"k%08d-%d" % (i, j) for j in range(20)]
    except KeyboardInterrupt:
        interrupts += 1
stop.set()
signal.signal(signal.SIGINT, signal.SIG_IGN)
db.close()
with shaledb.Db.open(url) as again:
    missing = sum(v is None for v in again.get_many(acked))
print("interrupts", interrupts, "acked", len(acked), "missing", missing, flush=True)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="needs SIGINT to self")
def test_ctrl_c_storm_during_durable_writes_loses_nothing(tmp_path: Path) -> None:
    """Real SIGINTs every few milliseconds at a process writing durably: each write either
    raises KeyboardInterrupt or is acknowledged; the writer never stops, nothing
    acknowledged is missing on reopen, and close() returns."""
    seed = int.from_bytes(os.urandom(4), "little")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(tmp_path / "db"), str(seed)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, (proc.stdout, proc.stderr[-3000:])
    last = proc.stdout.split()
    assert last[-6:-4] == ["interrupts", "40"] and last[-2:] == ["missing", "0"], (proc.stdout, proc.stderr)
