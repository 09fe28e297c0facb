"""Memtable-flush edge cases: a stalled L0 at close, and SST id collisions."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

import pytest

from shaledb import Db, Settings
from shaledb.store import ObjectStore, StoreWrapper, open_store


def _settings(**kw: object) -> Settings:
    return Settings(compactor=None, garbage_collector=None, **kw)  # type: ignore[arg-type]


@pytest.mark.timeout(60)
def test_close_does_not_wait_for_a_compactor_that_is_not_running(tmp_path: object) -> None:
    db = Db.open(str(tmp_path), settings=_settings(l0_max_ssts=2))
    for i in range(2):
        db.put(b"k%d" % i, b"v")
        db.flush(memtable=True)
    assert db.stats()["l0_ssts"] == 2
    db.put(b"last", b"v")
    db.close()  # the final flush goes past the L0 limit instead of hanging
    again = Db.open(str(tmp_path), settings=_settings(l0_max_ssts=2))
    try:
        assert again.get(b"last") == b"v"
        assert again.stats()["l0_ssts"] == 3
    finally:
        again.close()


class _SstSquatter(StoreWrapper):
    """Occupies the path of the first SST the writer creates, just before it does."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.squatted: list[str] = []
        self._lock = threading.Lock()

    def put(
        self,
        path: str,
        data: bytes | bytearray | memoryview,
        *,
        create: bool = False,
        attributes: Mapping[str, str] | None = None,
    ) -> None:
        with self._lock:
            first = create and path.startswith("compacted/") and not self.squatted
            if first:
                self.squatted.append(path)
        if first:
            self.inner.put(path, b"someone else's object", create=True)
        self.inner.put(path, data, create=create, attributes=attributes)


def test_an_sst_id_collision_draws_another_id() -> None:
    store = _SstSquatter(open_store("memory://flush-edges-collision"))
    with Db.open(store=store, settings=_settings(), seed=1) as db:
        db.put(b"a", b"1")
        db.flush(memtable=True)
        ids = [s.id for s in db.manifest.data.l0]
        assert db.get(b"a") == b"1"
    assert len(store.squatted) == 1
    assert store.squatted[0] not in {f"compacted/{i}.sst" for i in ids}
    with Db.open(store=open_store("memory://flush-edges-collision"), settings=_settings()) as db:
        assert db.get(b"a") == b"1"


def test_the_l0_stall_warning_says_whether_a_standalone_compactor_holds_the_role(tmp_path: Path) -> None:
    """It said "run `shaledb run-compactor`" while one was running (merely slow on a loaded
    host); now it names the compactor epoch holding the role, or says none does."""
    from shaledb import Compactor
    from shaledb.engine.flush import l0_stall_hint

    url = str(tmp_path / "db")
    quiet = Settings(compactor=None, garbage_collector=None)
    with Db.open(url, settings=quiet) as db:
        db.put(b"a", b"1")
        db.flush(memtable=True)
        hint = l0_stall_hint(db.manifest, embedded=False, url=url)
        assert f"no standalone one holds the role: start `shaledb --path {url} run-compactor`" in hint
        assert "Settings(compactor=CompactorOptions())" in hint
        assert l0_stall_hint(db.manifest, embedded=True) == ""
        c = Compactor.open(url)
        db.put(b"b", b"2")
        db.flush(memtable=True)  # the writer's manifest now carries the compactor's epoch
        assert f"compactor epoch {c.epoch} holds the role" in l0_stall_hint(db.manifest, embedded=False)
        c.close()  # gives the role back
        db.put(b"c", b"3")
        db.flush(memtable=True)
        assert "no standalone one holds the role" in l0_stall_hint(db.manifest, embedded=False)


_STALL = """
import sys, threading, time
from shaledb import Db, Settings
db = Db.open(sys.argv[1], settings=Settings(compactor=None, garbage_collector=None, l0_max_ssts=2))
for i in range(2):
    db.put(b"k%d" % i, b"v")
    db.flush(memtable=True)
db.put(b"x", b"v")
stalled = threading.Thread(target=db.flush, kwargs={"memtable": True})
stalled.start()
while db.metrics()["l0_stalls_total"] < 1:
    time.sleep(0.02)
for i in range(50):
    db.put(b"during%d" % i, b"v")  # puts while stalled: still one warning
db.close()  # ends the stall: the final flush goes past the limit
stalled.join()
"""


@pytest.mark.timeout(120)
def test_an_l0_stall_is_told_on_stderr_when_the_application_configured_no_logging(tmp_path: Path) -> None:
    """A writer without a compactor stopped at ``l0_max_ssts`` and, in a program that set up
    no logging, said nothing: the package's NullHandler kept Python's last-resort handler from
    printing the WARNING, so writes hung with no word of why. Now the first stall prints once,
    naming what to run."""
    url = str(tmp_path / "db")
    res = subprocess.run(
        [sys.executable, "-c", _STALL, url], capture_output=True, text=True, timeout=110, check=False
    )
    assert res.returncode == 0, res.stderr
    lines = [line for line in res.stderr.splitlines() if "flushes wait for compaction" in line]
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("shaledb: L0 has 2 SSTs (limit 2)")
    assert f"`shaledb --path file://{tmp_path / 'db'} run-compactor`" in lines[0]


def test_an_l0_stall_is_not_printed_twice_when_logging_is_configured(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """With a handler configured (here pytest's), the WARNING goes there only."""
    db = Db.open(str(tmp_path / "db"), settings=_settings(l0_max_ssts=2))
    for i in range(2):
        db.put(b"k%d" % i, b"v")
        db.flush(memtable=True)
    db.put(b"x", b"v")
    stalled = threading.Thread(target=db.flush, kwargs={"memtable": True})
    stalled.start()
    try:
        while not db.metrics()["l0_stalls_total"]:
            stalled.join(0.02)
    finally:
        db.close()
        stalled.join()
    assert [r for r in caplog.records if "flushes wait for compaction" in r.getMessage()]
    assert "flushes wait for compaction" not in capfd.readouterr().err
