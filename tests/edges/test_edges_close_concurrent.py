"""Two threads closing one Db at once.

``Db.close`` returned early only once the first close had left the open state, which
it does after its last flush: a second close arriving meanwhile ran the whole close
again -- flushes, manifest tidy, store close, and a second release of the shared read
pools, so another open handle's pools counted no user and shut down under it (stress:
three threads closing one Db while another stayed open left the pools' user count at 0
in 30 of 30 rounds). A concurrent close now waits for the first and returns.
Deterministic: the second close starts inside the first one's flush.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from shaledb import Db, Settings
from shaledb.db import writer as writer_mod
from shaledb.engine import reads

QUIET = Settings(compactor=None, garbage_collector=None)


def test_a_close_during_another_close_waits_for_it_and_releases_once(
    mem_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = Db.open(str(tmp_path / "other"), settings=QUIET)
    db = Db.open(mem_url, settings=QUIET)
    db.put(b"k", b"v", durable=False)
    releases: list[int] = []
    real_release = writer_mod.release_pools
    monkeypatch.setattr(writer_mod, "release_pools", lambda: (releases.append(1), real_release()))
    second: list[threading.Thread] = []
    second_done = threading.Event()
    real_flush = db.flush

    def flush_and_close_elsewhere(**kw: Any) -> None:
        if not second:  # the first close's flush: another thread closes the handle now
            t = threading.Thread(target=lambda: (db.close(), second_done.set()))
            second.append(t)
            t.start()
            assert not second_done.wait(0.3), "the second close returned before the first finished"
        real_flush(**kw)

    monkeypatch.setattr(db, "flush", flush_and_close_elsewhere)
    db.close()
    second[0].join(10)
    assert second_done.is_set() and db.closed
    assert releases == [1]
    assert reads._READ_POOL._users >= 1  # the other handle still holds the pools
    other.close()
    with Db.open(mem_url, settings=QUIET) as again:
        assert again.get(b"k") == b"v"


def test_a_close_made_again_inside_the_first_close_returns_at_once(tmp_path: Path) -> None:
    # A signal handler or a callback on the closing thread that closes the handle again must
    # not wait for the close it is part of (it would wait for ever).
    url = str(tmp_path / "db")
    db = Db.open(url, settings=QUIET)
    db.put(b"a", b"1")
    flush = db.flush
    inner: list[bool] = []

    def flush_and_close_again(*args: Any, **kwargs: Any) -> None:
        done = threading.Event()
        t = threading.Thread(target=lambda: (done.wait(10), done.is_set() or os._exit(3)), daemon=True)
        t.start()
        db.close()  # (on the old code without the same-thread check: waits for itself)
        inner.append(True)
        done.set()
        flush(*args, **kwargs)

    db.flush = flush_and_close_again  # type: ignore[method-assign]
    db.close()
    assert inner == [True]
    with Db.open(url, settings=QUIET) as again:
        assert again.get(b"a") == b"1"
