"""A store wrapper that counts the calls on one folder of a database, by kind.

Why: the tests of request costs ask "how many GETs of WAL objects did that open make?" or
"how many lease writes did that ingest make?"; one wrapper answers for any folder.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence

from ..store.base import ObjectMeta, ObjectStore
from ..store.wrappers import StoreWrapper


class FolderCalls(StoreWrapper):
    """Counts ``get``, ``get_range``, ``get_ranges``, ``head``, ``put``, ``list``, ``delete``
    and ``copy`` calls whose path (a listing's prefix, a copy's destination) starts with
    ``prefix``, in :attr:`counts`; thread-safe."""

    def __init__(self, inner: ObjectStore, prefix: str) -> None:
        super().__init__(inner)
        self.prefix = prefix
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _count(self, kind: str, path: str) -> None:
        if path.startswith(self.prefix):
            with self._lock:
                self.counts[kind] += 1

    def total(self, *kinds: str) -> int:
        """Calls of ``kinds`` (all kinds if none) since the last :meth:`reset`."""
        with self._lock:
            return sum(n for k, n in self.counts.items() if not kinds or k in kinds)

    def reset(self) -> None:
        with self._lock:
            self.counts.clear()

    def get(self, path: str) -> bytes:
        self._count("get", path)
        return self.inner.get(path)

    def get_range(self, path: str, start: int, end: int) -> bytes:
        self._count("get_range", path)
        return self.inner.get_range(path, start, end)

    def get_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        self._count("get_ranges", path)
        return self.inner.get_ranges(path, ranges)

    def head(self, path: str) -> ObjectMeta:
        self._count("head", path)
        return self.inner.head(path)

    def put(
        self,
        path: str,
        data: bytes | bytearray | memoryview,
        *,
        create: bool = False,
        attributes: Mapping[str, str] | None = None,
    ) -> None:
        self._count("put", path)
        self.inner.put(path, data, create=create, attributes=attributes)

    def list(self, prefix: str, *, offset: str | None = None) -> Iterator[ObjectMeta]:
        self._count("list", prefix)
        return self.inner.list(prefix, offset=offset)

    def delete(self, path: str) -> None:
        self._count("delete", path)
        self.inner.delete(path)

    def copy(self, src: str, dst: str, *, create: bool = False) -> None:
        self._count("copy", dst)
        self.inner.copy(src, dst, create=create)


__all__ = ["FolderCalls"]
