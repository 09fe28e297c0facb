"""One writer per database per process.

Opening a database's writer fences the previous one (docs/design/writer-open-and-recovery.md,
"Claiming the writer epoch"), which is
what a new process taking over wants -- but inside one process a second
``Db.open`` of the same database is almost always a mistake (two handles in
one program, a forgotten ``close``), and its only visible effect was that the
first handle's next write raised ``FencedError``. plyvel and lmdb users expect
an error at the second open, so that is what this registry gives:

* ``Db.open(url)`` and ``Db.open_from_checkpoint(url, ...)`` claim the
  database's canonical URL (``shaledb.engine.parents.canonical_url``: relative and
  absolute paths of one directory are the same database) before opening;
* a second claim while the first handle is open raises ``InvalidArgument``
  naming that handle and where it was opened;
* ``close()`` releases the claim (also after a background failure or when
  fenced by another process); a handle garbage-collected unclosed releases it
  too -- but an open writer's own threads keep it alive, so a handle the program
  dropped without closing (an exception between ``open`` and ``close``, a
  notebook cell run again) stays open until exit. :func:`open_handle` (public as
  ``Db.opened(url)``, named in the refusal) reaches it to close it; before, the
  refusal said "use that handle, or close() it" of a handle nothing could reach,
  and only restarting the process opened the database again.

Across processes nothing changes: a writer in another process is fenced as
before. A handle opened on an explicit ``store=`` object is not registered
(the caller decides what the store is; tests use this to fence in process).
"""

from __future__ import annotations

import os
import threading
import traceback
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import InvalidArgument

_lock = threading.Lock()
_claims: dict[str, tuple[weakref.ref[Any] | None, str]] = {}
"""canonical URL -> (the open handle, or None while it opens; where it was opened)."""


def _new_lock_after_fork() -> None:
    # Another thread may have held the lock when the process forked: the child (one
    # thread) would wait for it forever, in the writer's own at-fork hook first of all.
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_after_fork)


_opener = threading.local()
"""``where``: the user's call site of an open that runs on another thread (``shaledb.aio``'s)."""


@contextmanager
def opened_at(where: str) -> Iterator[None]:
    """Opens on this thread (a pool's, with no user frame on its stack) report ``where``
    as the place the handle was opened. (``aio.Db.open``'s error named
    ``concurrent/futures/thread.py:58``.)"""
    _opener.where = where
    try:
        yield
    finally:
        _opener.where = None


def caller() -> str:
    """The first stack frame outside shaledb: where the user opened the handle."""
    where: str | None = getattr(_opener, "where", None)
    if where is not None:
        return where
    for frame in reversed(traceback.extract_stack()[:-1]):
        if "/shaledb/" not in frame.filename.replace("\\", "/"):
            return f"{frame.filename}:{frame.lineno}"
    return "unknown"


def claim(key: str | None) -> str | None:
    """Reserve ``key`` for a writer about to open; InvalidArgument if one is open. Returns the key."""
    if key is None:
        return None
    where = caller()
    with _lock:
        held = _claims.get(key)
        if held is not None:
            ref, opened_at = held
            handle = None if ref is None else ref()
            if ref is None or (handle is not None and not getattr(handle, "closed", False)):
                what = "another Db.open of it is in progress" if ref is None else f"{handle!r} is open"
                raise InvalidArgument(
                    f"database {key} already has a writer in this process: {what} "
                    f"(opened at {opened_at}). Use that handle, or close() it before opening "
                    f"another; a second writer would fence the first. Lost it (an exception "
                    f"skipped its close, a notebook cell ran again)? shaledb.Db.opened(url) "
                    f"returns it: shaledb.Db.opened(url).close()"
                )
        _claims[key] = (None, where)
    return key


def open_handle(key: str) -> Any | None:
    """The open writer claimed as ``key`` in this process, or None (none, closed, or still
    opening)."""
    with _lock:
        held = _claims.get(key)
    handle = None if held is None or held[0] is None else held[0]()
    if handle is None or getattr(handle, "closed", False):
        return None
    return handle


def attach(key: str | None, handle: Any) -> None:
    """The writer claimed as ``key`` opened: hold it (weakly) until :func:`release`."""
    if key is None:
        return
    with _lock:
        held = _claims.get(key)
        where = held[1] if held is not None else "unknown"
        _claims[key] = (weakref.ref(handle, lambda _r: _drop(key, _r)), where)
    handle._writer_claim = key


def release(key: str | None, handle: Any = None) -> None:
    """Give up ``key`` (the writer closed, or its open failed)."""
    if key is None:
        return
    with _lock:
        held = _claims.get(key)
        if held is None:
            return
        ref = held[0]
        if handle is None or ref is None or ref() is handle or ref() is None:
            del _claims[key]


def _drop(key: str, ref: weakref.ref[Any]) -> None:
    with _lock:
        held = _claims.get(key)
        if held is not None and held[0] is ref:
            del _claims[key]
