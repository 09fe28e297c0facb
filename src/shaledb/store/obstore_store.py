"""The backend: obstore (Rust ``object_store``) behind :class:`ObjectStore`.

obstore releases the GIL during I/O, gives native create-if-absent on local
directories, memory, S3, GCS and Azure, and one error vocabulary. This module
only adapts it: root prefixes, sorted listings, and error translation.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import obstore
from obstore.exceptions import (
    AlreadyExistsError,
    BaseError,
    NotFoundError,
    NotSupportedError,
    PreconditionError,
)

from ..errors import (
    AlreadyExists,
    NotSupported,
    ObjectNotFound,
    PreconditionFailed,
    ShaleError,
    Unavailable,
)
from ..paths import check_prefix, check_relative_path
from .base import ObjectMeta

_MEMORY_STORES: dict[str, Any] = {}
_MEMORY_LOCK = threading.Lock()


def shared_memory_store(name: str) -> Any:
    """The process-wide obstore MemoryStore called ``name`` (created on first use)."""
    with _MEMORY_LOCK:
        st = _MEMORY_STORES.get(name)
        if st is None:
            st = obstore.store.MemoryStore()
            _MEMORY_STORES[name] = st
        return st


def drop_memory_store(name: str) -> None:
    """Forget a named memory store (tests use this to start clean)."""
    with _MEMORY_LOCK:
        _MEMORY_STORES.pop(name, None)


def _translate(exc: BaseException, path: str) -> ShaleError:
    if isinstance(exc, ShaleError):
        return exc
    if isinstance(exc, (FileNotFoundError, NotFoundError)):
        return ObjectNotFound(path)
    if isinstance(exc, AlreadyExistsError):
        return AlreadyExists(path)
    if isinstance(exc, PreconditionError):
        return PreconditionFailed(path)
    if isinstance(exc, (NotSupportedError, NotImplementedError)):
        return NotSupported(f"{path}: {exc}")
    err = Unavailable(f"object store error on {path}: {type(exc).__name__}: {exc}")
    err.__cause__ = exc
    return err


def _meta(raw: Mapping[str, Any], strip: int) -> ObjectMeta:
    lm = raw.get("last_modified")
    return ObjectMeta(
        path=str(raw["path"])[strip:],
        size=int(raw["size"]),
        last_modified=lm.timestamp() if lm is not None else 0.0,
        e_tag=raw.get("e_tag"),
    )


class ObstoreStore:
    """An obstore store plus a root prefix (for stores that cannot prefix).

    ``inner`` is any obstore store; ``root`` is joined in front of every path
    (with '/'), and stripped from listed paths.
    """

    def __init__(
        self,
        inner: Any,
        *,
        root: str = "",
        description: str,
        conditional_put: bool = True,
        attributes: bool = False,
        sort_listings: bool = False,
    ) -> None:
        self._inner = inner
        self._root = (root.strip("/") + "/") if root.strip("/") else ""
        self._description = description
        self._conditional = conditional_put
        self._attributes = attributes
        self._sort = sort_listings

    @property
    def supports_conditional_put(self) -> bool:
        return self._conditional

    @property
    def supports_attributes(self) -> bool:
        return self._attributes

    @property
    def inner(self) -> Any:
        return self._inner

    @property
    def root(self) -> str:
        return self._root

    def describe(self) -> str:
        return self._description

    def _p(self, path: str) -> str:
        return self._root + check_relative_path(path)

    def get(self, path: str) -> bytes:
        try:
            return bytes(obstore.get(self._inner, self._p(path)).bytes())
        except BaseException as exc:  # noqa: BLE001 - translated and re-raised
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            raise _translate(exc, path) from exc

    def get_range(self, path: str, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        try:
            return bytes(obstore.get_range(self._inner, self._p(path), start=start, end=end))
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            raise _translate(exc, path) from exc

    def get_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        if not ranges:
            return []
        try:
            out = obstore.get_ranges(
                self._inner,
                self._p(path),
                starts=[r[0] for r in ranges],
                ends=[max(r[0], r[1]) for r in ranges],
            )
            return [bytes(b) for b in out]
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            raise _translate(exc, path) from exc

    def head(self, path: str) -> ObjectMeta:
        try:
            return _meta(obstore.head(self._inner, self._p(path)), len(self._root))
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            raise _translate(exc, path) from exc

    def attributes(self, path: str) -> dict[str, str]:
        if not self._attributes:
            self.head(path)
            return {}
        try:
            res = obstore.get(self._inner, self._p(path), options={"head": True})
            return {str(k): str(v) for k, v in (res.attributes or {}).items()}
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            raise _translate(exc, path) from exc

    def put(
        self,
        path: str,
        data: bytes | bytearray | memoryview,
        *,
        create: bool = False,
        attributes: Mapping[str, str] | None = None,
    ) -> None:
        if create and not self._conditional:
            raise NotSupported(f"{self._description} has no conditional writes")
        kwargs: dict[str, Any] = {"mode": "create" if create else "overwrite"}
        if attributes and self._attributes:
            kwargs["attributes"] = dict(attributes)
        try:
            obstore.put(self._inner, self._p(path), data, **kwargs)
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            raise _translate(exc, path) from exc

    def list(self, prefix: str, *, offset: str | None = None) -> Iterator[ObjectMeta]:
        check_prefix(prefix)
        strip = len(self._root)
        kwargs: dict[str, Any] = {"prefix": self._root + prefix if (self._root + prefix) else None}
        if offset is not None:
            kwargs["offset"] = self._root + offset
        try:
            stream = obstore.list(self._inner, **kwargs)
            if self._sort:
                metas = [_meta(m, strip) for chunk in stream for m in chunk]
                metas.sort(key=lambda m: m.path)
                yield from metas
                return
            for chunk in stream:
                for m in chunk:
                    yield _meta(m, strip)
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, (KeyboardInterrupt, SystemExit, GeneratorExit)):
                raise
            raise _translate(exc, prefix) from exc

    def delete(self, path: str) -> None:
        try:
            obstore.delete(self._inner, self._p(path))
        except FileNotFoundError:
            return
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            err = _translate(exc, path)
            if isinstance(err, ObjectNotFound):
                return
            raise err from exc

    def copy(self, src: str, dst: str, *, create: bool = False) -> None:
        try:
            obstore.copy(self._inner, self._p(src), self._p(dst), overwrite=not create)
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            err = _translate(exc, src)
            if isinstance(err, NotSupported) or (isinstance(err, Unavailable) and create):
                # Fall back to read + conditional write (S3 has no copy-if-absent).
                self.put(dst, self.get(src), create=create)
                return
            if isinstance(err, AlreadyExists):
                raise AlreadyExists(dst) from exc
            raise err from exc

    def close(self) -> None:
        return None
