"""The backend: obstore (Rust ``object_store``) behind :class:`ObjectStore`.

obstore releases the GIL during I/O, gives native create-if-absent on local
directories, memory, S3, GCS and Azure, and one error vocabulary. This module
only adapts it, and papers over the places where its backends disagree with
each other or with the contract in :mod:`.base`:

* listing prefixes: obstore matches whole path segments (``a/b`` does not
  match ``a/bc``); the contract is a plain string prefix, so a prefix that does
  not end in ``/`` lists its parent directory and filters;
* listing order: local listings are sorted (:class:`.local_store.LocalObstoreStore` makes
  every local-directory call itself with ``os`` calls, as obstore's LocalStore
  does them: those hang in a forked child);
* range reads that start at or past the end raise on every backend (and
  ``get_ranges`` panics inside Rust); the contract returns ``b""``;
* S3 has no copy-if-absent; it falls back to read + create-if-absent put;
* a create that object_store reports as AlreadyExists while nothing exists
  (S3's 409 ConditionalRequestConflict) is transient, not a lost race;
* errors become :mod:`shaledb.errors`; text that contains a configured secret
  is never chained or repeated.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NoReturn

import obstore
from obstore.exceptions import (
    AlreadyExistsError,
    NotFoundError,
    NotSupportedError,
    PermissionDeniedError,
    PreconditionError,
    UnauthenticatedError,
)

from ..errors import (
    AlreadyExists,
    ForkedHandle,
    InvalidArgument,
    InvalidPathError,
    NotSupported,
    ObjectNotFound,
    PermissionDenied,
    PreconditionFailed,
    ShaleError,
    Unavailable,
)
from ..format.paths import check_prefix, check_relative_path
from .base import BULK_DELETE_OBJECTS, ObjectMeta
from .http_errors import CloudService, bucket_missing, classify, http_status, is_bucket_missing
from .scrub import scrub, scrub_exception

log = logging.getLogger(__name__)

SINGLE_DELETE_THREADS = 8  # concurrent requests of a delete_many without bulk deletes
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
    """Forget a named memory store (tests use this to start clean): ``name``, or its
    ``memory://name[/prefix]`` URL (which dropped nothing before, silently)."""
    if name.startswith("memory://"):
        name = name[len("memory://") :].partition("/")[0]
    with _MEMORY_LOCK:
        _MEMORY_STORES.pop(name, None)


def _is_fatal(exc: BaseException) -> bool:
    """Exceptions that must propagate untouched (interrupts, simulated crashes)."""
    return not isinstance(exc, Exception) and type(exc).__name__ != "PanicException"


def _meta(raw: Mapping[str, Any], strip: int) -> ObjectMeta:
    lm = raw.get("last_modified")
    return ObjectMeta(
        path=str(raw["path"])[strip:],
        size=int(raw["size"]),
        last_modified=lm.timestamp() if lm is not None else 0.0,
        e_tag=raw.get("e_tag"),
    )


_CLOUD_PID: int | None = None
"""The process that made the first cloud request (obstore's I/O runtime lives in it)."""


def _check_cloud_fork() -> None:
    """ForkedHandle in a process forked after its parent made a cloud request.

    obstore runs cloud requests on one process-wide Rust runtime whose threads a forked
    child does not inherit: every S3/GCS/Azure request of the child, through an inherited
    store or a new one, waited forever. Local directories and memory stores do not use
    it that way and keep working in a child (every call of a local store is ``os`` calls:
    :class:`LocalObstoreStore`).
    """
    global _CLOUD_PID
    pid = os.getpid()
    if pid == _CLOUD_PID:
        return
    if _CLOUD_PID is None:
        _CLOUD_PID = pid
        return
    raise ForkedHandle(
        f"this process ({pid}) was forked from process {_CLOUD_PID} after that one used a cloud "
        "object store: obstore's I/O threads do not survive a fork, and its requests would hang. "
        "Start workers with multiprocessing's 'spawn' (or 'forkserver') start method, or fork "
        "before the parent opens anything on S3, GCS or Azure"
    )


_BACKEND_TEXT_MAX = 300
"""How much of a backend's message an error repeats: the first line, cut here (a response
body quoted in it, such as a web page answering a listing, once ran to 20 KB a log line).
Cut after scrubbing: a secret straddling the cut would otherwise lose its tail, and its head would
no longer match the secret the scrubber looks for."""


def _first_line(text: str) -> str:
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= _BACKEND_TEXT_MAX else line[:_BACKEND_TEXT_MAX] + "... (cut)"


class ObstoreStore:
    """An obstore store plus a root prefix (for stores that cannot prefix).

    ``inner`` is any obstore store; ``root`` is joined in front of every path
    (with '/'), and stripped from listed paths. ``secrets`` are strings (keys,
    tokens) that must never appear in an exception this store raises.
    ``service`` (cloud stores) names the bucket and endpoint, so set-up
    mistakes are told from outages (:mod:`.http_errors`). ``bulk_delete=False``
    deletes one object per request (see :func:`.cloud_options.bulk_deletes`).
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
        secrets: Iterable[str] = (),
        service: CloudService | None = None,
        bulk_delete: bool = True,
    ) -> None:
        self._service = service
        self._bulk_delete = bulk_delete
        self._answered = False  # any request answered yet (see http_errors.classify)
        self._bucket_seen = False
        self._client = inner
        self._root = (root.strip("/") + "/") if root.strip("/") else ""
        self._description = scrub(description)
        self._conditional = conditional_put
        self._attributes = attributes
        self._sort = sort_listings
        self._secrets = tuple(s for s in secrets if s)

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
    def _inner(self) -> Any:
        """The obstore store every request goes through (checked for a fork, on a cloud)."""
        if self._service is not None:
            _check_cloud_fork()
        return self._client

    @property
    def root(self) -> str:
        return self._root

    @property
    def service(self) -> CloudService | None:
        """The bucket and endpoint of a cloud store; None for a local or memory one."""
        return self._service

    def describe(self) -> str:
        return self._description

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._description!r})"

    def _p(self, path: str) -> str:
        return self._root + check_relative_path(path)

    def _error(self, exc: BaseException, path: str) -> ShaleError:
        """Translate a backend exception; the caller raises it ``from`` ``exc``."""
        if isinstance(exc, ShaleError):
            return exc
        if self._service is not None:
            setup = self._setup_mistake(exc, path)
            if setup is not None:
                return setup
        if isinstance(exc, (FileNotFoundError, NotFoundError)):
            return ObjectNotFound(path)
        if isinstance(exc, AlreadyExistsError):
            return AlreadyExists(path)
        if isinstance(exc, PreconditionError):
            return PreconditionFailed(path)
        if isinstance(exc, (NotSupportedError, NotImplementedError)):
            return NotSupported(f"{self._description}: {path}: {self._scrub(str(exc))}")
        if isinstance(exc, (PermissionDeniedError, UnauthenticatedError)):
            return PermissionDenied(
                f"{self._description} refused access to {path} ({type(exc).__name__}): "
                "check the credentials and permissions configured for this store"
            )
        if isinstance(exc, ValueError) and "path" in str(exc).lower():
            return InvalidPathError(f"object path rejected by the store: {path!r}")
        return Unavailable(
            f"object store error on {self._description}: {path}: "
            f"{type(exc).__name__}: {_first_line(self._scrub(str(exc)))}"
        )

    def _setup_mistake(self, exc: BaseException, path: str) -> ShaleError | None:
        assert self._service is not None
        if http_status(str(exc)) is not None:
            self._answered = True  # an HTTP answer, even an error, proves the endpoint
        err = classify(exc, path, self._description, self._service, self._answered)
        if err is None and isinstance(exc, (FileNotFoundError, NotFoundError)) and not self._bucket_seen:
            # A HEAD's 404 has no body to say whether the object or the bucket is
            # missing: the first one is checked with a one-object listing.
            try:
                next(iter(obstore.list(self._inner, chunk_size=1)), None)
                self._bucket_seen = True
            except Exception as probe:  # noqa: BLE001 - any failure of the probe keeps the original error
                if is_bucket_missing(str(probe)):
                    return bucket_missing(self._service)
        return err

    def _ok(self) -> None:
        """A request was answered: the endpoint is right and the bucket exists."""
        self._answered = self._bucket_seen = True

    def _scrub(self, text: str) -> str:
        return scrub(text, self._secrets)

    def _raise(self, exc: BaseException, path: str) -> NoReturn:
        err = self._error(exc, path)
        scrub_exception(exc, self._secrets)  # the chain below err is clean, whatever it carried
        if err is exc:
            raise err
        raise err from exc

    def get(self, path: str) -> bytes:
        try:
            out = bytes(obstore.get(self._inner, self._p(path)).bytes())
            self._ok()
            return out
        except BaseException as exc:
            if _is_fatal(exc):
                raise
            self._raise(exc, path)

    def get_range(self, path: str, start: int, end: int) -> bytes:
        if start < 0 or end < 0:
            raise InvalidArgument(f"range [{start}, {end}) of {path} must not be negative")
        if end <= start:
            return b""  # no I/O: an empty range is empty whether or not the object exists
        try:
            got = bytes(obstore.get_range(self._inner, self._p(path), start=start, end=end))
            self._ok()
            return got
        except BaseException as exc:
            if _is_fatal(exc):
                raise
            err = self._error(exc, path)
            if isinstance(err, Unavailable) and self.head(path).size <= start:
                return b""  # the range starts at or past the end
            self._raise(exc, path)

    def get_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        if not ranges:
            return []
        if any(s < 0 or e < 0 for s, e in ranges):
            raise InvalidArgument(f"ranges of {path} must not be negative: {list(ranges)!r}")
        wanted = [(s, e) for s, e in ranges if e > s]
        try:
            out = (
                obstore.get_ranges(
                    self._inner,
                    self._p(path),
                    starts=[s for s, _ in wanted],
                    ends=[e for _, e in wanted],
                )
                if wanted
                else []
            )
        except BaseException as exc:
            if _is_fatal(exc):
                raise
            err = self._error(exc, path)
            if not isinstance(err, Unavailable) and type(exc).__name__ != "PanicException":
                self._raise(exc, path)
            # A range starting past the end makes obstore fail (or panic); redo
            # the ranges one by one, where the contract is handled.
            return [self.get_range(path, s, e) for s, e in ranges]
        self._ok()
        it = iter(out)
        return [bytes(next(it)) if e > s else b"" for s, e in ranges]

    def head(self, path: str) -> ObjectMeta:
        try:
            meta = _meta(obstore.head(self._inner, self._p(path)), len(self._root))
            self._ok()
            return meta
        except BaseException as exc:
            if _is_fatal(exc):
                raise
            self._raise(exc, path)

    def attributes(self, path: str) -> dict[str, str]:
        if not self._attributes:
            self.head(path)
            return {}
        try:
            res = obstore.get(self._inner, self._p(path), options={"head": True})
            return {str(k): str(v) for k, v in (res.attributes or {}).items()}
        except BaseException as exc:
            if _is_fatal(exc):
                raise
            self._raise(exc, path)

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
            self._ok()
        except BaseException as exc:
            if _is_fatal(exc):
                raise
            if create and isinstance(exc, AlreadyExistsError) and not self._exists(path):
                # object_store reports S3's "409 ConditionalRequestConflict" (a
                # competing request was in flight, nothing landed) as
                # AlreadyExists; AWS says to retry it. Nothing there: transient.
                raise Unavailable(
                    f"{self._description}: conditional write of {path} met a concurrent request "
                    "and did not land; retry it"
                ) from None
            self._raise(exc, path)

    def _exists(self, path: str) -> bool:
        try:
            self.head(path)
        except ObjectNotFound:
            return False
        return True

    def list(self, prefix: str, *, offset: str | None = None) -> Iterator[ObjectMeta]:
        check_prefix(prefix)
        if offset is not None and not isinstance(offset, str):
            raise InvalidArgument(f"list offset must be a string, got {offset!r}")
        # obstore prefixes match whole segments: list the parent directory and
        # filter; a listing offset just below the prefix skips what precedes it.
        cut = prefix.rfind("/") + 1
        parent, partial = prefix[:cut], prefix[cut:]
        floor = prefix[:-1] if partial else None
        if floor is not None and (offset is None or offset < floor):
            offset = floor
        full_parent = self._root + parent
        kwargs: dict[str, Any] = {"prefix": full_parent or None}
        if offset is not None:
            kwargs["offset"] = self._root + offset
        strip = len(self._root)
        return self._list(kwargs, strip, prefix, bool(partial))

    def _list(self, kwargs: dict[str, Any], strip: int, prefix: str, filtered: bool) -> Iterator[ObjectMeta]:
        try:
            stream = obstore.list(self._inner, **kwargs)
            if self._sort:
                metas = [_meta(m, strip) for chunk in stream for m in chunk]
                metas.sort(key=lambda m: m.path)
                chunks: Iterable[Iterable[ObjectMeta]] = [metas]
            else:
                chunks = ([_meta(m, strip) for m in chunk] for chunk in stream)
            for chunk in chunks:
                self._ok()
                for meta in chunk:
                    if filtered and not meta.path.startswith(prefix):
                        if meta.path > prefix:
                            return  # sorted: nothing later can match
                        continue
                    yield meta
        except GeneratorExit:
            raise
        except BaseException as exc:
            if _is_fatal(exc):
                raise
            self._raise(exc, prefix)

    def delete(self, path: str) -> None:
        try:
            obstore.delete(self._inner, self._p(path))
            self._ok()
        except BaseException as exc:
            if _is_fatal(exc):
                raise
            if isinstance(self._error(exc, path), ObjectNotFound):
                return
            self._raise(exc, path)

    def delete_many(self, paths: Sequence[str]) -> None:
        full = [self._p(p) for p in paths]  # every path checked before anything goes
        if not self._bulk_delete:
            with ThreadPoolExecutor(SINGLE_DELETE_THREADS) as pool:
                list(pool.map(self.delete, paths))
            return
        for i in range(0, len(full), BULK_DELETE_OBJECTS):
            chunk = full[i : i + BULK_DELETE_OBJECTS]
            try:
                obstore.delete(self._inner, chunk)
            except BaseException as exc:
                if _is_fatal(exc):
                    raise
                if not isinstance(self._error(exc, chunk[0]), ObjectNotFound):
                    self._raise(exc, chunk[0][len(self._root) :])
                # Local files and Azure report a missing object, and the bulk call stops
                # there; S3 does not. Finish this chunk one object at a time.
                strip = len(self._root)
                for path in chunk:
                    self.delete(path[strip:])

    def copy(self, src: str, dst: str, *, create: bool = False) -> None:
        try:
            obstore.copy(self._inner, self._p(src), self._p(dst), overwrite=not create)
        except BaseException as exc:
            if _is_fatal(exc):
                raise
            err = self._error(exc, src)
            if isinstance(err, NotSupported) and create:
                # S3 has no copy-if-absent: read, then create-if-absent put.
                attrs = self.attributes(src) if self._attributes else None
                self.put(dst, self.get(src), create=True, attributes=attrs)
                return
            if isinstance(err, AlreadyExists):
                raise AlreadyExists(dst) from exc
            self._raise(exc, src)

    def close(self) -> None:
        return None
