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

from shaledb import CompactorOptions, Db, FencedError, NotFound, RetryOptions, Unavailable
from shaledb.admin import read_manifest
from shaledb.compaction import Compactor, EmbeddedCompactor
from shaledb.store import ObjectStore, StoreWrapper
from shaledb.store.retrying import RetryingStore
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


def _renewed(mem: ObjectStore, clock: ManualClock) -> None:
    """Wait for the holder of epoch 1 to renew its lease within half a lease of ``clock``.

    The holder's thread sets its next wake-up from the clock when it starts waiting: on a
    busy machine the test's advance could land before that, leaving the thread a deadline
    no later advance reached (the test then timed out). Nudging the clock a little while
    waiting wakes it whenever it started its wait; the nudges stay far below a lease."""
    nudged = 0.0
    deadline = time.monotonic() + 60.0
    while _lease(mem, 1)["renewed_s"] < clock.now() - LEASE_S / 2:
        assert time.monotonic() < deadline, "a renewal"
        if nudged < LEASE_S / 8:
            clock.advance(0.05)
            nudged += 0.05
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
                _renewed(mem, clock)
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


def _remote_holder(store: ObjectStore, epoch: int, clock: ManualClock) -> None:
    """A live, serving role lease of ``epoch`` held by a compactor on another host."""
    body = {
        "epoch": epoch,
        "host": "elsewhere.invalid",
        "pid": 1,
        "pidns": 0,
        "token": "00ff",
        "since_s": clock.now(),
        "renewed_s": clock.now(),
        "lease_s": LEASE_S,
        "serving": True,
    }
    store.put(_role_path(epoch), json.dumps(body).encode())


def _held_elsewhere(mem: ObjectStore, clock: ManualClock) -> Compactor:
    """A database whose compactor epoch 1 a serving compactor on another host holds (its lease
    live at ``clock``'s now); returns the local compactor that claimed the epoch (to close)."""
    Db.open(store=mem, settings=NO_BG).close()
    gone = Compactor.open(store=mem, options=OPTS, clock=clock, seed=1)
    _remote_holder(mem, 1, clock)
    return gone


class BeforeClaim(StoreWrapper):
    """Runs ``first`` before this compactor's next manifest write goes out (once ``armed``):
    another compactor acting between this one's look at the lease and its claim."""

    def __init__(self, inner: ObjectStore, first: Callable[[], None]) -> None:
        super().__init__(inner)
        self.first, self.armed = first, False

    def put(self, path, data, *, create=False, attributes=None):  # type: ignore[no-untyped-def]
        if self.armed and path.startswith("manifest/"):
            self.armed = False
            self.first()
        return super().put(path, data, create=create, attributes=attributes)


def test_two_standbys_that_see_one_lapse_claim_it_once() -> None:
    """Both standbys see epoch 1's lease lapse in the same poll; the first to write claims
    epoch 2 and the second stands by for it. Before, the second's claim bumped the epoch
    again (3) and fenced the first: one wasted fence and a lost job."""
    clock = ManualClock(auto_advance=False)
    with memory_store() as mem:
        gone = _held_elsewhere(mem, clock)
        c = Compactor.open(store=mem, options=OPTS, clock=clock, seed=3)
        thread = threading.Thread(target=c.run)

        def c_claims_first() -> None:
            thread.start()
            _until(lambda: _lease(mem, 2).get("serving") is True, "the other standby claims and serves")

        hooked = BeforeClaim(mem, c_claims_first)
        b = Compactor.open(store=hooked, options=OPTS, clock=clock, seed=2)
        assert b.holder is not None and b.holder.epoch == 1 and c.holder is not None
        clock.advance(LEASE_S + 1)  # the holder of epoch 1 is gone: its lease lapses
        hooked.armed = True
        r = b.run_once()  # sees the lapse; c claims before b's write lands
        assert not hooked.armed and read_manifest(store=mem).compactor_epoch == 2
        assert b.epoch is None and b.holder is not None and b.holder.epoch == 2, b.holder
        assert r.held_by.startswith("compactor epoch 2 (host ") and not r.did_work
        assert c.epoch == 2 and thread.is_alive()
        c.stop()
        thread.join(60)
        c.close()
        b.close()
        gone.close()


class HoldRoleLease(StoreWrapper):
    """Holds the first write of ``epoch``'s role lease until ``go`` is set (a claimer paused
    between its claim and its lease)."""

    def __init__(self, inner: ObjectStore, epoch: int) -> None:
        super().__init__(inner)
        self.epoch = epoch
        self.held, self.go = threading.Event(), threading.Event()

    def put(self, path, data, *, create=False, attributes=None):  # type: ignore[no-untyped-def]
        if path == _role_path(self.epoch) and not self.go.is_set():
            self.held.set()
            self.go.wait(60)
        return super().put(path, data, create=create, attributes=attributes)


def test_a_standby_gives_a_fresh_claim_time_to_write_its_lease() -> None:
    """A standby that polls between another compactor's claim (the epoch bumped) and its
    first role-lease write stands by for ``role_lease_s`` of its own clock; past that the
    claim counts as lapsed. Before, it saw no lease and fenced the claimer at once."""
    clock = ManualClock(auto_advance=False)
    with memory_store() as mem:
        gone = _held_elsewhere(mem, clock)
        b = Compactor.open(store=mem, options=OPTS, clock=clock, seed=2)
        assert b.holder is not None and b.holder.epoch == 1
        hold = HoldRoleLease(mem, 2)
        opened: list[Compactor] = []
        thread = threading.Thread(
            target=lambda: opened.append(
                Compactor.open(store=hold, options=OPTS, clock=clock, seed=3, takeover=True)
            )
        )
        thread.start()
        _until(hold.held.is_set, "the takeover claimed epoch 2 and is about to write its lease")
        assert read_manifest(store=mem).compactor_epoch == 2
        r = b.run_once()
        assert b.epoch is None and read_manifest(store=mem).compactor_epoch == 2
        assert r.held_by == "compactor epoch 2 (just claimed; no role lease yet)" and not r.did_work
        clock.advance(LEASE_S)  # the grace is counted from b's first look at epoch 2
        assert b.run_once().held_by and read_manifest(store=mem).compactor_epoch == 2
        clock.advance(1)  # past it: the claimer never wrote its lease, b takes the role
        r = b.run_once()
        assert b.epoch == 3 and not r.held_by and read_manifest(store=mem).compactor_epoch == 3
        hold.go.set()
        thread.join(60)
        with pytest.raises(FencedError):
            opened[0].run_once()
        for comp in (opened[0], b, gone):
            comp.close()


def test_at_open_an_epoch_without_a_lease_is_taken_at_once() -> None:
    """No grace for a compactor that did not watch the role: an embedded compactor or a
    one-off run keeps no role lease, and a standalone compactor takes the role from them."""
    with memory_store() as mem:
        Db.open(store=mem, settings=NO_BG).close()
        first = Compactor.open(store=mem, options=OPTS)
        mem.delete(_role_path(1))  # as an embedded compactor's or an older shaledb's epoch
        second = Compactor.open(store=mem, options=OPTS)
        assert (first.epoch, second.epoch, second.holder) == (1, 2, None)
        first.close()
        second.close()


class RoleWrites(StoreWrapper):
    """Records the body of every role-lease write of ``epoch``."""

    def __init__(self, inner: ObjectStore, epoch: int) -> None:
        super().__init__(inner)
        self.epoch, self.bodies = epoch, []  # type: list[dict[str, Any]]

    def put(self, path, data, *, create=False, attributes=None):  # type: ignore[no-untyped-def]
        if path == _role_path(self.epoch):
            self.bodies.append(json.loads(bytes(data)))
        return super().put(path, data, create=create, attributes=attributes)


def test_a_standby_taking_over_in_run_writes_a_serving_lease_at_once() -> None:
    """Its first lease write says ``serving``: written as a one-off's first, a standby polling
    before the rewrite took it for a one-off run and fenced it."""
    clock = ManualClock(auto_advance=False)
    with memory_store() as mem:
        gone = _held_elsewhere(mem, clock)
        writes = RoleWrites(mem, 2)
        b = Compactor.open(store=writes, options=OPTS, clock=clock, seed=2)
        thread = threading.Thread(target=b.run)
        thread.start()
        clock.advance(LEASE_S + 1)
        _until(lambda: b.epoch == 2 and bool(writes.bodies), "the standby takes over")
        assert writes.bodies[0]["serving"] is True, writes.bodies
        b.stop()
        thread.join(60)
        b.close()
        gone.close()


class Outage(StoreWrapper):
    """The store fails every call for ``lasting_s`` of ``clock`` from :meth:`begin` (each
    failure a fast ``Unavailable``: connections refused), then answers again."""

    def __init__(self, inner: ObjectStore, clock: ManualClock) -> None:
        super().__init__(inner)
        self.clock, self.until = clock, -1.0

    def begin(self, lasting_s: float) -> None:
        self.until = self.clock.monotonic() + lasting_s

    def _check(self) -> None:
        if self.clock.monotonic() < self.until:
            self.clock.advance(5.0)  # (a refused attempt, then the caller's backoff)
            raise Unavailable("connection refused (the test's outage)")

    def get(self, path):  # type: ignore[no-untyped-def]
        self._check()
        return super().get(path)

    def get_range(self, path, start, end):  # type: ignore[no-untyped-def]
        self._check()
        return super().get_range(path, start, end)

    def head(self, path):  # type: ignore[no-untyped-def]
        self._check()
        return super().head(path)

    def list(self, prefix, *, offset=None):  # type: ignore[no-untyped-def]
        self._check()
        return super().list(prefix, offset=offset)


def test_a_store_outage_is_no_lapse_for_a_standby_that_saw_it(caplog: pytest.LogCaptureFixture) -> None:
    """A 40 s outage keeps the holder from renewing and the standby from reading; after it,
    the standby's first read finds the lease unrenewed for longer than ``role_lease_s``.
    That is the outage, not a dead holder: the standby waits half a lease from its last
    failed request for a renewal. Before, it claimed at once and fenced a healthy compactor
    (a writer's embedded compactor did the same to ``run-compactor``, which exited 4)."""
    clock = ManualClock(auto_advance=True)
    with memory_store() as mem:
        gone = _held_elsewhere(mem, clock)
        outage = Outage(mem, clock)
        retry = RetryOptions(initial_backoff_s=0.05, max_backoff_s=2.0, timeout_s=600.0, max_attempts=1000)
        b = Compactor.open(store=RetryingStore(outage, retry, clock=clock), options=OPTS, clock=clock, seed=2)
        assert b.holder is not None and b.holder.epoch == 1
        outage.begin(40.0)
        r = b.run_once()  # its reads retried through the outage, then found the old lease
        assert clock.monotonic() >= outage.until
        assert b.epoch is None and read_manifest(store=mem).compactor_epoch == 1, "fenced the holder"
        assert r.held_by.startswith("compactor epoch 1 (host elsewhere.invalid") and not r.did_work
        clock.advance(LEASE_S / 4)
        _remote_holder(mem, 1, clock)  # the holder renews once the store answers
        clock.advance(LEASE_S / 2)
        assert b.run_once().held_by and read_manifest(store=mem).compactor_epoch == 1
        clock.advance(LEASE_S + 1)  # and now it is gone: no renewal with the store answering
        r = b.run_once()
        assert b.epoch == 2 and not r.held_by and read_manifest(store=mem).compactor_epoch == 2
        b.close()
        gone.close()


def test_a_compactor_opened_to_serve_is_stood_by_for_before_it_runs() -> None:
    """A restarted ``run-compactor`` (A') claims epoch 2 at open; a standby (B) that watched
    the old holder lapse polls before A' is in ``run()``. Opened with ``serve=True``, A''s
    first lease write says ``serving`` and B stands by for it. Before, the lease said
    "one-off run" until ``run()`` rewrote it, and B claimed epoch 3 and fenced A'."""
    clock = ManualClock(auto_advance=False)
    with memory_store() as mem:
        gone = _held_elsewhere(mem, clock)
        b = Compactor.open(store=mem, options=OPTS, clock=clock, seed=2)
        assert b.holder is not None and b.holder.epoch == 1
        clock.advance(LEASE_S + 1)  # the holder of epoch 1 was killed: its lease lapsed
        writes = RoleWrites(mem, 2)
        restarted = Compactor.open(store=writes, options=OPTS, clock=clock, seed=3, serve=True)
        assert restarted.epoch == 2 and writes.bodies[0]["serving"] is True, writes.bodies
        r = b.run_once()  # between A''s open and its run()
        assert b.epoch is None and r.held_by.startswith("compactor epoch 2 (host ") and not r.did_work
        assert read_manifest(store=mem).compactor_epoch == 2
        thread = threading.Thread(target=restarted.run)
        thread.start()
        assert b.run_once().held_by.startswith("compactor epoch 2 (host ") and thread.is_alive()
        restarted.stop()
        thread.join(60)
        assert writes.bodies[-1]["serving"] is False  # out of run(): a one-off's lease again
        restarted.close()
        b.close()
        gone.close()


def test_a_one_off_run_is_still_fenced_by_a_standby() -> None:
    """Without ``serve`` (``run_once``, ``--once``) the lease says "one-off run": a standby
    does not wait for it, as before."""
    clock = ManualClock(auto_advance=False)
    with memory_store() as mem:
        gone = _held_elsewhere(mem, clock)
        b = Compactor.open(store=mem, options=OPTS, clock=clock, seed=2)
        clock.advance(LEASE_S + 1)
        once = Compactor.open(store=mem, options=OPTS, clock=clock, seed=3)
        assert once.epoch == 2 and _lease(mem, 2)["serving"] is False
        assert not b.run_once().held_by and b.epoch == 3
        with pytest.raises(FencedError):
            once.run_once()
        for comp in (once, b, gone):
            comp.close()


def test_run_compactor_leases_as_serving_before_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run-compactor`` (no ``--once``) writes a serving lease at its claim, before ``run()``;
    ``--once`` does not."""
    import shaledb.cli.compaction as cli_compaction
    from shaledb.cli import main

    url = str(tmp_path / "db")
    Db.open(url, settings=NO_BG).close()
    seen: list[bool] = []
    real_open = Compactor.open

    def open_and_look(*args: Any, **kwargs: Any) -> Compactor:
        c = real_open(*args, **kwargs)
        lease = json.loads((tmp_path / "db" / _role_path(c.epoch or 0)).read_bytes())
        seen.append(lease["serving"])
        c.stop()  # run() returns at once
        return c

    monkeypatch.setattr(cli_compaction.Compactor, "open", open_and_look)
    assert main(["--path", url, "--json", "run-compactor", "--poll-interval", "0.05"]) in (0, None)
    assert main(["--path", url, "--json", "run-compactor", "--once"]) in (0, None)
    assert seen == [True, False]
