"""Two compactors of one database: the second stands by while the first's role lease is
live, takes over once it lapses, and the fenced one stops with FencedError (exit status 4
from the CLI). Before, every open fenced the running compactor, and two under a
restart-always supervisor fenced each other in a loop."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from compaction_support import NO_BG, memory_store

from shaledb import CompactorOptions, Db, FencedError, NotFound
from shaledb.admin import read_manifest
from shaledb.compaction import Compactor, EmbeddedCompactor
from shaledb.store import ObjectStore, StoreWrapper
from shaledb.testing import ManualClock

OPTS = CompactorOptions(min_l0_ssts=2, max_sst_size_bytes=8192, poll_interval_s=1.0)
LEASE_S = 30.0
"""``CompactorOptions.role_lease_s``'s default."""


def fill(db: Db, n: int, tag: bytes = b"v") -> dict[bytes, bytes]:
    model = {}
    for i in range(n):
        k = b"key%05d" % (i * 7919 % 997)
        model[k] = tag + b"%d" % i * 8
        db.put(k, model[k], durable=False)
        if i % 50 == 49:
            db.flush(memtable=True)
    db.flush(memtable=True)
    return model


def _until(cond: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def _role_path(epoch: int) -> str:
    """Where a standalone compactor keeps its role lease (docs/compaction-gc.md)."""
    return f"compactions/{epoch:020d}.role"


class HangRoleLease(StoreWrapper):
    """Makes the renewal of epoch 1's role lease hang once ``hang`` is set (a hung holder)."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.hang, self.hung, self.go = threading.Event(), threading.Event(), threading.Event()

    def put(self, path, data, *, create=False, attributes=None):  # type: ignore[no-untyped-def]
        if path == _role_path(1) and self.hang.is_set():
            self.hung.set()
            self.go.wait(60)
        return super().put(path, data, create=create, attributes=attributes)


def _lease(store: ObjectStore, epoch: int) -> dict[str, Any]:
    try:
        return dict(json.loads(store.get(_role_path(epoch))))
    except NotFound:
        return {}


def test_second_compactor_stands_by_then_takes_over_when_the_lease_lapses(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock(auto_advance=False)
    with memory_store() as mem:
        store = HangRoleLease(mem)
        db = Db.open(store=mem, settings=NO_BG)
        fill(db, 300)
        first = Compactor.open(store=store, options=OPTS, clock=clock, seed=1)
        assert first.epoch == 1
        raised: list[BaseException] = []

        def serve() -> None:
            try:
                first.run()
            except BaseException as exc:  # the test looks at it
                raised.append(exc)

        thread = threading.Thread(target=serve)
        thread.start()
        _until(lambda: _lease(mem, 1).get("serving") is True, "the first compactor serves")
        with caplog.at_level(logging.INFO, logger="shaledb.compaction"):
            second = Compactor.open(store=store, options=OPTS, clock=clock, seed=2)
            assert second.epoch is None and second.holder is not None and second.holder.epoch == 1
            # The first keeps renewing its lease as time passes: the second waits.
            for _ in range(16):
                clock.advance(LEASE_S / 8)
                _until(lambda: _lease(mem, 1)["renewed_s"] >= clock.now() - LEASE_S / 2, "a renewal")
                r = second.run_once()
                assert r.held_by.startswith("compactor epoch 1 ") and not r.did_work
        assert read_manifest(store=mem).compactor_epoch == 1 and thread.is_alive()
        said = [rec for rec in caplog.records if "standing by" in rec.getMessage()]
        assert len(said) == 1 and said[0].levelno == logging.INFO, said
        assert "compactor epoch 1 (host " in said[0].getMessage() and " since " in said[0].getMessage()
        # The first hangs (no more renewals); past its lease the second takes over and compacts.
        store.hang.set()
        clock.advance(LEASE_S / 4)
        _until(store.hung.is_set, "the first compactor hangs in a renewal")
        clock.advance(LEASE_S + 1)
        model = fill(db, 200, tag=b"w")
        r = second.run_once()
        assert second.epoch == 2 and second.holder is None and r.committed >= 1 and not r.held_by
        store.go.set()  # the first wakes up, finds itself fenced and stops
        thread.join(60)
        assert not thread.is_alive() and len(raised) == 1 and isinstance(raised[0], FencedError), raised
        assert "compactor epoch 2 (host " in str(raised[0]) and "(epoch 1) stops" in str(raised[0])
        first.close()  # a fenced compactor releases nothing: the role stays the second's
        m = read_manifest(store=mem)
        assert m.compactor_epoch == 2 and m.option("compactor.released") is None
        second.close()
        db.refresh_manifest()
        assert all(db.get(k) == v for k, v in model.items())
        db.close()


def test_takeover_fences_a_live_compactor_at_once() -> None:
    with memory_store() as store:
        Db.open(store=store, settings=NO_BG).close()
        first = Compactor.open(store=store, options=OPTS)
        second = Compactor.open(store=store, options=OPTS, takeover=True)
        assert (first.epoch, second.epoch) == (1, 2)
        with pytest.raises(FencedError):
            first.run_once()
        first.close()
        second.close()


def test_writer_opened_while_a_standalone_compactor_runs_leaves_it_the_role() -> None:
    """The rule stands (a standalone compactor has the role over the embedded one), now also
    when the writer opens second: its embedded compactor starts paused instead of fencing."""
    with memory_store() as store:
        Db.open(store=store, settings=NO_BG).close()
        standalone = Compactor.open(store=store, options=dataclasses.replace(OPTS, poll_interval_s=0.02))
        thread = threading.Thread(target=standalone.run)
        thread.start()
        _until(lambda: _lease(store, 1).get("serving") is True, "the standalone compactor serves")
        db = Db.open(store=store, settings=NO_BG.replace(compactor=OPTS))
        (emb,) = [s for s in db._background if isinstance(s, EmbeddedCompactor)]
        _until(lambda: emb.fenced is not None, "the embedded compactor starts paused")
        assert emb.compactor.epoch is None and read_manifest(store=store).compactor_epoch == 1
        fill(db, 100)
        _until(lambda: len(read_manifest(store=store).data.l0) < 2, "the standalone one compacts")
        assert thread.is_alive() and read_manifest(store=store).compactor_epoch == 1  # not fenced
        standalone.stop()
        thread.join(60)
        standalone.close()
        _until(lambda: emb.fenced is None and emb.compactor.epoch == 2, "it resumes once that one closes")
        db.close()


SHALEDB = [sys.executable, "-c", "import sys; from shaledb.cli import main; sys.exit(main())"]


def test_two_compactor_processes_do_not_fence_each_other(tmp_path: Path) -> None:
    url = str(tmp_path / "db")
    with Db.open(url, settings=NO_BG) as db:
        fill(db, 300)
    env = dict(os.environ)  # (the default role lease: a standby looks every 7.5 s)
    cmd = [*SHALEDB, "--path", url, "run-compactor", "--poll-interval", "0.05"]
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for log in logs:
            with log.open("wb") as out:
                procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env))
            _until(lambda: b"compactor " in log.read_bytes(), f"{log.name} starts")  # noqa: B023
        a, b = procs
        assert b"standing by: compactor epoch 1 (host " in logs[1].read_bytes(), logs[1].read_text()
        time.sleep(3.0)  # a restart-always loop fenced and restarted several times a second
        assert a.poll() is None and b.poll() is None, logs[0].read_text() + logs[1].read_text()
        assert read_manifest(url).compactor_epoch == 1
        a.send_signal(signal.SIGKILL)  # a crash: b takes over (the process is gone)
        a.wait()
        _until(lambda: read_manifest(url).compactor_epoch == 2, "the standby takes over")
        assert b.poll() is None
        # An explicit takeover fences b, which stops with a clear line and status 4.
        once = subprocess.run(
            [*cmd, "--once", "--takeover"], env=env, capture_output=True, timeout=120, check=False
        )
        assert once.returncode == 0, once.stderr
        assert b.wait(60) == 4
        text = logs[1].read_text()
        assert "run-compactor stopped, fenced: compactor epoch 3" in text and "Traceback" not in text, text
        assert read_manifest(url).compactor_epoch == 3
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
