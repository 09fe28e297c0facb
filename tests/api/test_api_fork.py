"""A writer handle inherited by a forked child: the child cannot write through it.

Before, a durable put in the child wrote a WAL object under the parent's epoch at the
slot the parent writes next (acknowledged in the child, invisible to the parent, whose
next write failed with a CorruptionError), and the child's close() waited forever.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest

import shaledb
from shaledb.format import paths as store_paths
from shaledb.store import open_store

pytestmark = pytest.mark.skipif(sys.platform == "win32" or not hasattr(os, "fork"), reason="needs fork")


def _child(db: shaledb.Db, out: Connection) -> None:
    result: dict[str, object] = {"get": db.get(b"a")}
    try:
        db.put(b"child", b"1")
        result["put"] = "ok"
    except Exception as exc:
        result["put"] = f"{type(exc).__name__}: {exc}"
    out.send(result)
    db.close()
    out.send("closed")


def test_forked_child_cannot_write_and_parent_keeps_writing(tmp_path: Path) -> None:
    db = shaledb.Db.open(tmp_path / "db")
    try:
        db.put(b"a", b"1")
        ctx = multiprocessing.get_context("fork")
        recv, send = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_child, args=(db, send))
        p.start()
        try:
            assert recv.poll(30), "the child sent nothing"
            result = recv.recv()
            assert result["get"] == b"1"  # reads work in the child
            assert str(result["put"]).startswith("ForkedHandle"), result
            assert recv.poll(30) and recv.recv() == "closed", "the child's close() hung"
        finally:
            p.join(5)
            if p.is_alive():
                p.kill()
        db.put(b"b", b"2")  # the parent is unaffected
    finally:
        db.close()
    with shaledb.Db.open(tmp_path / "db") as again:
        assert again.get_many([b"a", b"b", b"child"]) == [b"1", b"2", None]


def _cloud_child(url: str, options: dict[str, object], out: Connection) -> None:
    try:
        with shaledb.DbReader.open(url, store_options=options) as r:
            out.send(("opened", r.get(b"a")))
    except Exception as exc:
        out.send((type(exc).__name__, str(exc)))


def _cloud_child_says(method: str, loc: Any, wait_s: float) -> tuple[object, object]:
    """What :func:`_cloud_child`, started with ``method``, sent within ``wait_s``."""
    ctx = multiprocessing.get_context(method)
    recv, send = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_cloud_child, args=(loc.url, loc.options, send))
    p.start()
    try:
        assert recv.poll(wait_s), f"the {method} child sent nothing in {wait_s} s"
        kind, message = recv.recv()
        return kind, message
    finally:
        p.join(10)
        if p.is_alive():
            p.kill()


def test_a_child_forked_after_cloud_requests_fails_at_once(s3_url_factory: Any) -> None:
    """obstore's cloud requests run on threads a forked child lacks: they hung forever (even
    through a store the child made itself); now the first one raises ForkedHandle."""
    loc = s3_url_factory()
    with shaledb.Db.open(loc.url, store_options=loc.options) as db:
        db.put(b"a", b"1")
    kind, message = _cloud_child_says("fork", loc, 60)
    assert kind == "ForkedHandle" and "spawn" in str(message), (kind, message)
    assert _cloud_child_says("spawn", loc, 120) == ("opened", b"1")  # the way, and it works


def _reader_child(url: str, out: Connection) -> None:
    try:
        with contextlib.closing(open_store(url)) as store:  # (verify and change feeds stat objects)
            size = store.head(store_paths.manifest_path(1)).size
        with shaledb.DbReader.open(url) as r:
            r.refresh()
            out.send(("read", r.get(b"a"), size > 0))
    except Exception as exc:
        out.send((type(exc).__name__, str(exc)))


def test_a_child_forked_while_the_parent_reads_a_local_db_opens_its_own_reader(tmp_path: Path) -> None:
    """The habit for process pools (fork is multiprocessing's default on Linux): pass the
    URL, open a reader in the worker. A child forked within seconds of its parent's last
    use of a local database waited forever for the manifest (obstore's local reads ran
    on its runtime's blocking threads, which the child lacks)."""
    url = str(tmp_path / "db")
    with shaledb.Db.open(url) as db, shaledb.DbReader.open(url) as parent:
        db.put(b"a", b"1")
        parent.refresh()  # the parent has just read the manifest
        with contextlib.closing(open_store(url)) as store:  # and deleted an object, as GC does
            store.put("tmp/scratch", b"x")
            store.delete("tmp/scratch")
        ctx = multiprocessing.get_context("fork")
        recv, send = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_reader_child, args=(url, send))
        p.start()
        try:
            assert recv.poll(60), "the forked child hung in a store read"
            assert recv.recv() == ("read", b"1", True)
        finally:
            p.join(5)
            if p.is_alive():
                p.kill()


_FORK_OPS: dict[str, Any] = {
    "delete": lambda st: st.delete("tmp/a"),
    "delete_missing": lambda st: st.delete("tmp/none"),
    "delete_many": lambda st: st.delete_many(["tmp/a", "tmp/none", "tmp/b/c"]),
    "copy": lambda st: st.copy("tmp/a", "tmp/new/copy"),
    "copy_create": lambda st: st.copy("tmp/a", "tmp/new/copy", create=True),
    "put": lambda st: st.put("tmp/a", b"child"),
    "put_create": lambda st: st.put("tmp/new/x", b"child", create=True),
    "list": lambda st: [m.path for m in st.list("tmp/")],
    "list_offset": lambda st: [m.path for m in st.list("tmp/", offset="tmp/a")],
    "get_range": lambda st: st.get_range("tmp/a", 1, 3),
    "get_ranges": lambda st: st.get_ranges("tmp/a", [(0, 1), (2, 9)]),
    "head": lambda st: st.head("tmp/a").size,
    "attributes": lambda st: st.attributes("tmp/a"),
}
_FORK_RESULTS: dict[str, object] = {
    "list": ["tmp/a", "tmp/b/c"],
    "list_offset": ["tmp/b/c"],
    "get_range": b"ar",
    "get_ranges": [b"p", b"rent"],
    "head": 6,
    "attributes": {},
}


def _store_op_child(store: Any, op: str, out: Connection) -> None:
    try:
        out.send(("ok", _FORK_OPS[op](store)))
    except Exception as exc:
        out.send((type(exc).__name__, str(exc)))


@pytest.mark.parametrize("op", sorted(_FORK_OPS))
def test_a_child_forked_right_after_the_parent_used_a_local_store_can_use_it(tmp_path: Path, op: str) -> None:
    """Every operation of a local directory store works in a forked child (a worker running
    GC, a checkpoint, a compaction, a writer): they went through obstore, whose blocking
    threads the child lacks, and a delete or copy there waited forever when the parent had
    used the store within seconds before the fork."""
    import obstore

    store = open_store(str(tmp_path / "db"))
    store.put("tmp/a", b"parent")
    store.put("tmp/b/c", b"x")
    store.put("tmp/scratch", b"x")
    store.delete("tmp/scratch")
    # The parent's obstore runtime has live blocking threads at the fork, whatever the store uses.
    side = obstore.store.LocalStore(prefix=str(tmp_path), mkdir=True)
    obstore.put(side, "side", b"x")
    obstore.delete(side, "side")
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_store_op_child, args=(store, op, send))
    p.start()
    try:
        assert recv.poll(20), f"the forked child hung in {op}"
        kind, value = recv.recv()
    finally:
        p.join(5)
        if p.is_alive():
            p.kill()
    assert (kind, value) == ("ok", _FORK_RESULTS.get(op)), (kind, value)
