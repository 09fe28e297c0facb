"""``dbm``-style access to a shaledb database, so ``dbm`` and ``shelve`` code runs on it.

    import shelve, shaledb.dbm
    with shelve.Shelf(shaledb.dbm.open("s3://bucket/db", "c")) as sh:
        sh["config"] = {"retries": 3}

:func:`open` takes a database URL (or ``os.PathLike``) and a ``dbm`` flag:

* ``"r"`` -- read-only, through a :class:`~shaledb.DbReader` (never fences the
  writer; writes raise ``shaledb.ReadOnlyError``, an :data:`error` and an ``OSError``
  like ``dbm.dumb``'s, so the standard ``dbm.error`` catches it too); the database must exist.
* ``"w"`` -- read and write an existing database (opens the writer).
* ``"c"`` -- read and write, creating the database if needed (the default).
* ``"n"`` -- as ``"c"``, but start empty: every key present is deleted.

A trailing ``"s"`` (``"cs"``, ``"ws"``) makes every write durable before it
returns, like ``dbm.gnu``'s synchronized mode; without it writes are visible
at once and durable after :meth:`ShaleDbm.sync` or :meth:`ShaleDbm.close`
(the WAL still flushes them within ``Settings.flush_interval_s``). ``"u"`` is
accepted and ignored (shaledb always locks: one writer per database).

Keys and values are bytes; ``str`` is encoded as UTF-8, as ``dbm`` does.
Iteration is in key order; ``keys()`` is a list, as ``dbm`` objects give it. ``len()``
and ``keys()`` read every key (``dbm`` code expects them; keep them off hot paths on
large databases).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING, NoReturn, SupportsIndex, TypeVar, cast, overload

from .errors import InvalidArgument, NotFound, ReadOnlyError, ShaleError
from .settings import Settings

if TYPE_CHECKING:
    from .db.reader import DbReader
    from .db.writer import Db

D = TypeVar("D")

error = ShaleError
"""The exception ``dbm`` code catches (``except shaledb.dbm.error``): shaledb's base error."""

_FLAGS = ("r", "w", "c", "n")


def _as_bytes(x: object, what: str) -> bytes:
    if isinstance(x, str):
        return x.encode("utf-8")
    if isinstance(x, (bytes, bytearray, memoryview)):
        return bytes(x)
    raise TypeError(f"shaledb.dbm {what}s must be bytes or str, not {type(x).__name__}")


class ShaleDbm(MutableMapping[bytes, bytes]):
    """A ``dbm`` object over one shaledb handle (see module docstring)."""

    def __init__(self, handle: Db | DbReader, *, writable: bool, durable: bool) -> None:
        self._h = handle
        self._writable = writable
        self._durable = durable

    @property
    def handle(self) -> Db | DbReader:
        """The underlying :class:`~shaledb.Db` (or :class:`~shaledb.DbReader` for flag ``"r"``)."""
        return self._h

    def __getitem__(self, key: bytes | str) -> bytes:
        value = self._h.get(_as_bytes(key, "key"))
        if value is None:
            raise KeyError(key)
        return value

    # Typed as Mapping.get is (and as Db.get): without a default the value or None, with
    # one the value or the default (it was Any either way, so a type checker saw nothing).
    @overload
    def get(self, key: bytes | str) -> bytes | None: ...
    @overload
    def get(self, key: bytes | str, default: D) -> bytes | D: ...
    def get(self, key: bytes | str, default: D | None = None) -> bytes | D | None:
        return self._h.get(_as_bytes(key, "key"), default)

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, (str, bytes, bytearray, memoryview)):
            return False
        return self._h.get(_as_bytes(key, "key")) is not None

    def __setitem__(self, key: bytes | str, value: bytes | str) -> None:
        k, v = _as_bytes(key, "key"), _as_bytes(value, "value")
        self._writer().put(k, v, durable=self._durable)

    def __delitem__(self, key: bytes | str) -> None:
        k = _as_bytes(key, "key")
        db = self._writer()
        if db.get(k) is None:
            raise KeyError(key)
        db.delete(k, durable=self._durable)

    def __iter__(self) -> Iterator[bytes]:
        return self._h.keys()

    def keys(self) -> list[bytes]:  # type: ignore[override]
        """Every key, in key order, as a list: what ``dbm`` objects return (``dbm.dumb``,
        ``dbm.gnu`` and ``dbm.ndbm`` alike); a mapping's ``KeysView`` is not indexable, so
        ``d.keys()[0]`` of ``dbm`` code failed. A full scan, as :meth:`__len__`."""
        return list(self._h.keys())

    def __len__(self) -> int:
        with self._h.scan() as it:
            return sum(1 for _ in it)

    def _writer(self) -> Db:
        """The writer, for a write; ``ReadOnlyError`` (an :data:`error`, and an ``OSError`` as
        ``dbm.dumb`` raises) when opened read-only (the handle is a reader)."""
        if not self._writable:
            raise ReadOnlyError(
                "this shaledb.dbm database was opened read-only (flag 'r'); open it with 'w' or 'c' to write"
            )
        return cast("Db", self._h)

    def sync(self) -> None:
        """Make every write so far durable."""
        if self._writable:
            self._writer().flush()

    def close(self) -> None:
        """Flush and close the database (idempotent)."""
        self._h.close()

    def __enter__(self) -> ShaleDbm:
        self._h.__enter__()  # (refuses a closed handle, as a closed file refuses ``with``)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce_ex__(self, protocol: SupportsIndex) -> NoReturn:
        from .db.mapping import refuse_pickle

        refuse_pickle(self)

    def __repr__(self) -> str:
        return f"shaledb.dbm({self._h!r})"


def open(
    url: str | os.PathLike[str],
    flag: str = "c",
    mode: int = 0o666,
    *,
    settings: Settings | None = None,
    store_options: Mapping[str, object] | None = None,
) -> ShaleDbm:
    """Open the database at ``url`` as a ``dbm`` object (``flag`` as in :func:`dbm.open`).

    ``mode`` is accepted for ``dbm.open`` compatibility and ignored (object
    stores have no file modes). ``settings`` and ``store_options`` are passed
    to :meth:`~shaledb.Db.open`.
    """
    from .db.reader import DbReader, DbReaderOptions
    from .db.writer import Db

    if not isinstance(flag, str) or not flag or flag[0] not in _FLAGS or set(flag[1:]) - {"s", "u"}:
        raise InvalidArgument(
            f"flag must be 'r', 'w', 'c' or 'n', optionally followed by 's' or 'u'; got {flag!r}"
        )
    kind, durable = flag[0], "s" in flag[1:]
    if kind == "r":
        opts = DbReaderOptions(establish_checkpoint=False, background_poll=False)
        try:
            return ShaleDbm(
                DbReader.open(url, options=opts, store_options=store_options), writable=False, durable=False
            )
        except NotFound as exc:
            _no_database(exc)
    try:
        db = Db.open(url, settings=settings, create_if_missing=kind != "w", store_options=store_options)
    except NotFound as exc:
        _no_database(exc)
    if kind == "n":
        _clear(db)
    return ShaleDbm(db, writable=True, durable=durable)


def _no_database(exc: NotFound) -> NoReturn:
    """What a failed open raises: for a missing database, a ``NotFound`` (``dbm.error``
    catches it) saying which flag creates one; anything more specific -- a missing bucket
    (``BucketNotFound``), a destroyed database -- as it was raised, since no flag helps.
    Before, every ``NotFound`` became a bare ``ShaleError`` advising "need flag 'c' or 'n'",
    also for a missing bucket opened with flag ``"c"``."""
    if type(exc) is not NotFound:
        raise exc
    raise NotFound(f"need flag 'c' or 'n' to create a new database: {exc}") from exc


def _clear(db: Db) -> None:
    """Delete every key (flag ``"n"``), in batches, durably."""
    from .db.batch import WriteBatch

    while True:
        with db.scan(limit=1000) as it:
            keys = [k for k, _ in it]
        if not keys:
            return
        b = WriteBatch()
        for k in keys:
            b.delete(k)
        db.write(b)


__all__ = ["ShaleDbm", "error", "open"]
