"""Dict habits on database handles: ``db[k]``, ``k in db``, ``del db[k]``, iteration.

Users arrive from ``dict``, ``dbm``, plyvel and lmdb and type what those
taught them; :class:`~shaledb.Db`, its :class:`~shaledb.Snapshot`,
:class:`~shaledb.DbReader` and its :class:`~shaledb.ReaderSnapshot` give it the
same meaning (the reads are :class:`shaledb.db.queries.Queries`', the writes
``Db``'s own; this module holds their helpers):

* ``h[key]`` is the value, or ``KeyError`` when the key is absent
  (``h.get(key, default)`` returns ``default`` instead);
* ``key in h`` is a point lookup;
* ``iter(h)`` and ``h.keys()`` give keys in ascending order;
  ``keys()``, ``values()`` and ``items()`` take the same ``start``/``end``
  (half-open ``[start, end)``), ``prefix`` and ``reverse`` as ``scan`` and
  read one consistent view each (they pin it until exhausted or closed);
* on the writer, ``h[key] = value`` is a durable ``put`` and ``del h[key]``
  a durable ``delete`` that raises ``KeyError`` when the key is absent
  (checked by a lookup first, so not atomic with concurrent writers of the
  same key -- use ``delete`` when absence does not matter).

Handles do not define ``len()``: counting is a full scan, which a handle
should not do behind ``bool(h)`` or ``len(h)``; :mod:`shaledb.dbm` (the
``dbm``-compatible wrapper) does, because ``dbm`` code expects it.

A handle holds threads, locks and open stores, so it cannot be pickled;
:func:`refuse_pickle` says to pickle the URL and open it again instead. Its
threads also keep it from ever being garbage-collected, so a handle never
closed is reported at interpreter exit (:func:`warn_unclosed`) instead of
when it is collected, as an unclosed file is.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator
from typing import NoReturn, overload


def closing(it: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
    """Iterate ``it``, closing it (releasing its pinned view) when done or abandoned."""
    try:
        yield from it
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()


def refuse_pickle(handle: object) -> NoReturn:
    """Raise the TypeError a pickled handle gets (a ``Db`` passed to a process pool, say):
    what to pickle instead, and what to open with it in the same flavour of the API."""
    cls = type(handle)
    name, module = f"shaledb {cls.__name__}", cls.__module__
    opener = "DbReader" if "Reader" in name else "Db"
    if module == "shaledb.aio":
        name, reopen = f"shaledb.aio.{cls.__name__}", f"await shaledb.aio.{opener}.open(url)"
    elif module == "shaledb.dbm":
        reopen = "shaledb.dbm.open(url)"
    else:
        reopen = f"shaledb.{opener}.open(url)"
    raise TypeError(
        f"cannot pickle a {name}: it holds threads, locks and open stores. "
        f"Pickle the database URL (and checkpoint id, for a pinned read) and call "
        f"{reopen} where it is unpickled"
    )


def warn_unclosed(handle: object) -> None:
    """The ``ResourceWarning`` of a handle still open at interpreter exit, as an unclosed
    file gets: hidden by default, shown by ``python -X dev`` or ``-W default`` (and an
    error under ``-W error::ResourceWarning``) to find the handle a program forgot."""
    warnings.warn(
        f"unclosed {handle!r}: close() it, or open it in a 'with' block",
        ResourceWarning,
        stacklevel=1,
        source=handle,
    )


@overload
def as_url(url: None) -> None: ...
@overload
def as_url(url: str | os.PathLike[str]) -> str: ...
def as_url(url: str | os.PathLike[str] | None) -> str | None:
    """A database URL from a str or an ``os.PathLike`` (``pathlib.Path``): both name a database."""
    return os.fspath(url) if isinstance(url, os.PathLike) else url


def handle_url(url: str | None, store: object) -> str | None:
    """A handle's public ``url``: the canonical URL it was opened on, credentials removed.

    None for a handle opened on an explicit ``store=``: that store's description is no URL
    the handle could be opened again with (its ``repr`` shows it).
    """
    if store is not None or not url:
        return None
    from ..engine.parents import canonical_url
    from ..store.scrub import scrub

    return scrub(canonical_url(url))


def run_close_hooks(hooks: list[Callable[[], None]]) -> None:
    """Run, once, what a wrapper of a handle asked for when the handle closes.

    ``shaledb.aio``'s handles stop their thread pool this way: closing the blocking
    handle directly (``shaledb.Db.opened(url).close()``) used to leave those threads
    running for the rest of the process.
    """
    todo = list(hooks)
    hooks.clear()
    for hook in todo:
        hook()
