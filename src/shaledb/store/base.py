"""The object-store contract every backend and wrapper implements.

The engine sees storage only through :class:`ObjectStore`: a synchronous,
thread-safe interface rooted at one database's prefix, with paths relative to
that root. Conditional creation (``create=True``) is the only CAS primitive the
protocols need; backends without it are wrapped by the two-phase store.

Errors are from :mod:`shaledb.errors`: a missing object raises
:class:`~shaledb.errors.ObjectNotFound`, a lost create raises
:class:`~shaledb.errors.AlreadyExists`, an unreachable store raises
:class:`~shaledb.errors.Unavailable`. Backends translate their own errors.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

PUT_ID_ATTRIBUTE = "shaleputid"
"""Attribute name under which a conditional put records its unique put id.

Lowercase letters only: valid as S3/GCS user metadata and as an Azure
metadata name (a C# identifier: no '-'), and not dropped by HTTP proxies that
discard header names containing '_'.
"""

BULK_DELETE_OBJECTS = 1000
"""Paths per bulk delete request: S3's DeleteObjects limit."""


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    """What a listing or a head returns about one object."""

    path: str
    size: int
    last_modified: float
    """Seconds since the Unix epoch, as the store reports it."""
    e_tag: str | None = None


@runtime_checkable
class ObjectStore(Protocol):
    """A bucket-like store rooted at one database's prefix.

    Requires: paths are relative (``shaledb.format.paths.check_relative_path``);
    ``list`` returns objects sorted by path; ``delete`` of a missing object is
    not an error.
    """

    @property
    def supports_conditional_put(self) -> bool:
        """True if ``put(create=True)`` is atomic create-if-absent."""
        ...

    @property
    def supports_attributes(self) -> bool:
        """True if puts can store string attributes that ``attributes()`` returns."""
        ...

    def describe(self) -> str:
        """A URL-like description without credentials, for logs and errors."""
        ...

    def get(self, path: str) -> bytes:
        """The whole object."""
        ...

    def get_range(self, path: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)``; shorter if the object ends before ``end``."""
        ...

    def get_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """Several ranges of one object, in one call where the backend allows."""
        ...

    def head(self, path: str) -> ObjectMeta:
        """Size and modification time without reading the object."""
        ...

    def attributes(self, path: str) -> dict[str, str]:
        """Attributes stored with the object (empty if unsupported)."""
        ...

    def put(
        self,
        path: str,
        data: bytes | bytearray | memoryview,
        *,
        create: bool = False,
        attributes: Mapping[str, str] | None = None,
    ) -> None:
        """Store ``data`` at ``path``.

        With ``create=True`` the put succeeds only if no object exists at
        ``path`` and raises :class:`~shaledb.errors.AlreadyExists` otherwise.
        ``attributes`` are dropped silently by backends that cannot store them.

        ``data`` belongs to the store once passed: a mutable buffer must not be
        changed or reused afterwards. obstore takes buffers without copying,
        and its memory store serves later reads from the very buffer it was
        given (docs/benchmarks.md, stop 24).
        """
        ...

    def list(self, prefix: str, *, offset: str | None = None) -> Iterator[ObjectMeta]:
        """Objects whose path starts with ``prefix``, sorted by path.

        With ``offset``, only paths strictly greater than ``offset``.
        """
        ...

    def delete(self, path: str) -> None:
        """Remove the object; a missing object is not an error."""
        ...

    def delete_many(self, paths: Sequence[str]) -> None:
        """Remove several objects, in bulk requests where the backend has them.

        S3 deletes up to 1,000 objects per request, so the garbage collector
        and a hard destroy cost one request per thousand objects instead of one
        each. Every path is checked before anything is deleted; a missing
        object is not an error. There is no order among the deletions, and a
        failure may leave any subset deleted: callers delete only what they may
        lose in any order, and repeat the call to finish.
        """
        ...

    def copy(self, src: str, dst: str, *, create: bool = False) -> None:
        """Copy an object inside this store (server-side where possible)."""
        ...

    def close(self) -> None:
        """Release resources; further calls are undefined."""
        ...
