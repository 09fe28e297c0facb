"""Dict habits on database handles: ``db[k]``, ``k in db``, ``del db[k]``, iteration.

Users arrive from ``dict``, ``dbm``, plyvel and lmdb and type what those
taught them; these mixins give :class:`~shaledb.Db`, its
:class:`~shaledb.Snapshot`, :class:`~shaledb.DbReader` and its
:class:`~shaledb.ReaderSnapshot` the same meaning:

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
:func:`refuse_pickle` says to pickle the URL and open it again instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, NoReturn, overload


class MappingReads:
    """Read-side dict habits over ``get`` and ``scan`` (see module docstring)."""

    def get(self, key: bytes, default: Any = None) -> Any:  # pragma: no cover - every handle defines it
        raise NotImplementedError

    def scan(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - every handle defines it
        raise NotImplementedError

    def __getitem__(self, key: bytes) -> bytes:
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return value  # type: ignore[no-any-return]

    def __contains__(self, key: object) -> bool:
        return self.get(key) is not None  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[bytes]:
        return self.keys()

    def keys(
        self,
        start: bytes | None = None,
        end: bytes | None = None,
        *,
        prefix: bytes | None = None,
        reverse: bool = False,
    ) -> Iterator[bytes]:
        """Keys in ``[start, end)`` (or under ``prefix``) in key order, from one consistent view."""
        return (k for k, _ in self._pairs(start, end, prefix, reverse))

    def values(
        self,
        start: bytes | None = None,
        end: bytes | None = None,
        *,
        prefix: bytes | None = None,
        reverse: bool = False,
    ) -> Iterator[bytes]:
        """Values of the keys :meth:`keys` would give, in the same order."""
        return (v for _, v in self._pairs(start, end, prefix, reverse))

    def items(
        self,
        start: bytes | None = None,
        end: bytes | None = None,
        *,
        prefix: bytes | None = None,
        reverse: bool = False,
    ) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` pairs as :meth:`keys` orders them (``scan`` with dict's name)."""
        return self._pairs(start, end, prefix, reverse)

    def _pairs(
        self, start: bytes | None, end: bytes | None, prefix: bytes | None, reverse: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        # Validate and pin now (not at the first next()), so bad bounds raise at the call.
        it = self.scan(start, end, prefix=prefix, reverse=reverse)
        return _closing(it)

    def __reduce_ex__(self, protocol: Any) -> NoReturn:
        refuse_pickle(self)


class MappingWrites(MappingReads):
    """The writer's ``h[key] = value`` and ``del h[key]``."""

    def put(self, key: bytes, value: bytes) -> Any:  # pragma: no cover - Db defines it
        raise NotImplementedError

    def delete(self, key: bytes) -> Any:  # pragma: no cover - Db defines it
        raise NotImplementedError

    def __setitem__(self, key: bytes, value: bytes) -> None:
        self.put(key, value)

    def __delitem__(self, key: bytes) -> None:
        if self.get(key) is None:
            raise KeyError(key)
        self.delete(key)


def _closing(it: Any) -> Iterator[tuple[bytes, bytes]]:
    """Iterate ``it``, closing it (releasing its pinned view) when done or abandoned."""
    try:
        yield from it
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()


def refuse_pickle(handle: object) -> NoReturn:
    """Raise the TypeError a pickled handle gets: what to pickle instead."""
    name = type(handle).__name__
    raise TypeError(
        f"cannot pickle a shaledb {name}: it holds threads, locks and open stores. "
        f"Pickle the database URL (and checkpoint id, for a pinned read) and call "
        f"{'DbReader' if 'Reader' in name else 'Db'}.open(url) where it is unpickled"
    )


@overload
def as_url(url: None) -> None: ...
@overload
def as_url(url: str | os.PathLike[str]) -> str: ...
def as_url(url: str | os.PathLike[str] | None) -> str | None:
    """A database URL from a str or an ``os.PathLike`` (``pathlib.Path``): both name a database."""
    return os.fspath(url) if isinstance(url, os.PathLike) else url
