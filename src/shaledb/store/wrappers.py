"""Store decorators: each wraps an :class:`ObjectStore` and is one.

Cross-cutting behaviour (accounting, injected latency, hiding a capability)
lives here rather than in the backends, so it composes with every backend and
with each other, e.g. ``RetryingStore(InstrumentedStore(open_store(url)))``
counts every attempt, while the reverse order counts logical calls.

:class:`StoreWrapper` forwards everything; a decorator overrides only what it
changes. Operation kinds (:data:`OP_KINDS`) are shared with the fault injector
so a rule and a counter speak about the same calls.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar

from ..clock import Clock
from ..errors import InvalidArgument, NotSupported, ObjectNotFound, PreconditionFailed
from .base import BULK_DELETE_OBJECTS, ObjectMeta, ObjectStore

T = TypeVar("T")

OP_KINDS: tuple[str, ...] = (
    "get",
    "get_range",
    "get_ranges",
    "head",
    "attributes",
    "put",
    "put_create",
    "list",
    "delete",
    "delete_many",
    "copy",
    "copy_create",
)
"""Every kind of store call; ``put_create``/``copy_create`` are the conditional forms.

A ``delete_many`` counts one request per :data:`BULK_DELETE_OBJECTS` paths, as S3 bills it."""


def find_wrapper(store: Any, cls: type[Any]) -> Any:
    """The first wrapper of type ``cls`` in ``store``'s chain of ``inner`` stores, or None."""
    seen = 0
    while store is not None and seen < 32:
        if isinstance(store, cls):
            return store
        store = getattr(store, "inner", None)
        seen += 1
    return None


class StoreWrapper:
    """Forwards every call to ``inner``; subclasses override what they change."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner

    @property
    def supports_conditional_put(self) -> bool:
        return self.inner.supports_conditional_put

    @property
    def supports_attributes(self) -> bool:
        return self.inner.supports_attributes

    def describe(self) -> str:
        return self.inner.describe()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"

    def get(self, path: str) -> bytes:
        return self.inner.get(path)

    def get_range(self, path: str, start: int, end: int) -> bytes:
        return self.inner.get_range(path, start, end)

    def get_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        return self.inner.get_ranges(path, ranges)

    def head(self, path: str) -> ObjectMeta:
        return self.inner.head(path)

    def attributes(self, path: str) -> dict[str, str]:
        return self.inner.attributes(path)

    def put(
        self,
        path: str,
        data: bytes | bytearray | memoryview,
        *,
        create: bool = False,
        attributes: Mapping[str, str] | None = None,
    ) -> None:
        self.inner.put(path, data, create=create, attributes=attributes)

    def list(self, prefix: str, *, offset: str | None = None) -> Iterator[ObjectMeta]:
        return self.inner.list(prefix, offset=offset)

    def delete(self, path: str) -> None:
        self.inner.delete(path)

    def delete_many(self, paths: Sequence[str]) -> None:
        self.inner.delete_many(paths)

    def copy(self, src: str, dst: str, *, create: bool = False) -> None:
        self.inner.copy(src, dst, create=create)

    def close(self) -> None:
        self.inner.close()


class NoConditionalStore(StoreWrapper):
    """Hides conditional writes, as on a store that has none.

    Tests use it to run the two-phase store over backends that do have them
    (memory, a local directory, moto), so that protocol is checked everywhere.
    """

    @property
    def supports_conditional_put(self) -> bool:
        return False

    def put(
        self,
        path: str,
        data: bytes | bytearray | memoryview,
        *,
        create: bool = False,
        attributes: Mapping[str, str] | None = None,
    ) -> None:
        if create:
            raise NotSupported(f"{self.describe()} has no conditional writes (create=True)")
        self.inner.put(path, data, attributes=attributes)

    def copy(self, src: str, dst: str, *, create: bool = False) -> None:
        if create:
            raise NotSupported(f"{self.describe()} has no conditional writes (copy create=True)")
        self.inner.copy(src, dst)


class PerCallStore(StoreWrapper):
    """Runs every call through :meth:`_call` with its operation kind (:data:`OP_KINDS`).

    The decorators that do the same around every call (count it, time it, delay
    it) override :meth:`_call` alone, plus what one kind needs beyond it (bytes
    read, a listing consumed lazily). ``requests`` is how many requests the call
    costs: a ``delete_many`` is one per :data:`BULK_DELETE_OBJECTS` paths.
    """

    def _call(self, kind: str, fn: Callable[[], T], requests: int = 1) -> T:
        return fn()

    def get(self, path: str) -> bytes:
        return self._call("get", lambda: self.inner.get(path))

    def get_range(self, path: str, start: int, end: int) -> bytes:
        return self._call("get_range", lambda: self.inner.get_range(path, start, end))

    def get_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        return self._call("get_ranges", lambda: self.inner.get_ranges(path, ranges))

    def head(self, path: str) -> ObjectMeta:
        return self._call("head", lambda: self.inner.head(path))

    def attributes(self, path: str) -> dict[str, str]:
        return self._call("attributes", lambda: self.inner.attributes(path))

    def put(
        self,
        path: str,
        data: bytes | bytearray | memoryview,
        *,
        create: bool = False,
        attributes: Mapping[str, str] | None = None,
    ) -> None:
        kind = "put_create" if create else "put"
        self._call(kind, lambda: self.inner.put(path, data, create=create, attributes=attributes))

    def list(self, prefix: str, *, offset: str | None = None) -> Iterator[ObjectMeta]:
        return self._call("list", lambda: self.inner.list(prefix, offset=offset))

    def delete(self, path: str) -> None:
        self._call("delete", lambda: self.inner.delete(path))

    def delete_many(self, paths: Sequence[str]) -> None:
        requests = -(-len(paths) // BULK_DELETE_OBJECTS)
        self._call("delete_many", lambda: self.inner.delete_many(paths), requests)

    def copy(self, src: str, dst: str, *, create: bool = False) -> None:
        self._call("copy_create" if create else "copy", lambda: self.inner.copy(src, dst, create=create))


@dataclass(frozen=True, slots=True)
class StoreStats:
    """Counts of an :class:`InstrumentedStore` since its last reset.

    ``requests`` and ``errors`` have a key for every kind in :data:`OP_KINDS`.
    One call is one request here: obstore may merge the ranges of a
    ``get_ranges`` into fewer HTTP requests, and a listing costs one request
    per 1,000 objects on S3 (see ``objects_listed``).
    """

    requests: Mapping[str, int] = field(default_factory=dict)
    errors: Mapping[str, int] = field(default_factory=dict)
    bytes_read: int = 0
    bytes_written: int = 0
    objects_listed: int = 0

    @property
    def total_requests(self) -> int:
        return sum(self.requests.values())

    def __sub__(self, other: StoreStats) -> StoreStats:
        """The counts between two snapshots: ``after - before``."""
        return StoreStats(
            requests=MappingProxyType({k: v - other.requests.get(k, 0) for k, v in self.requests.items()}),
            errors=MappingProxyType({k: v - other.errors.get(k, 0) for k, v in self.errors.items()}),
            bytes_read=self.bytes_read - other.bytes_read,
            bytes_written=self.bytes_written - other.bytes_written,
            objects_listed=self.objects_listed - other.objects_listed,
        )


ANSWERS = (ObjectNotFound, PreconditionFailed)
"""Exceptions that are the store's answer to a request, not a failure of it."""


class InstrumentedStore(PerCallStore):
    """Counts requests, errors and bytes per operation kind, thread-safely.

    Object-store cost is requests and bytes, so the engine reports them per
    workload; the hot path costs one uncontended lock per call. A call is
    counted when it is made, whether or not it succeeds; bytes are counted when
    they were actually transferred (written bytes on success only). An error is
    a call that failed; a missing object or a conditional write that found one
    (:data:`ANSWERS`) is the store's answer, expected many times a minute by a
    healthy writer (probes, fences), and not counted as one: an alert on errors
    would otherwise fire all the time.
    """

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self._requests = dict.fromkeys(OP_KINDS, 0)
            self._errors = dict.fromkeys(OP_KINDS, 0)
            self._read = 0
            self._written = 0
            self._listed = 0

    def snapshot(self) -> StoreStats:
        with self._lock:
            return StoreStats(
                requests=MappingProxyType(dict(self._requests)),
                errors=MappingProxyType(dict(self._errors)),
                bytes_read=self._read,
                bytes_written=self._written,
                objects_listed=self._listed,
            )

    def _call(self, kind: str, fn: Callable[[], T], requests: int = 1) -> T:
        with self._lock:
            self._requests[kind] += requests
        try:
            return fn()
        except ANSWERS:
            raise
        except BaseException:
            with self._lock:
                self._errors[kind] += 1
            raise

    def _read_bytes(self, n: int) -> None:
        with self._lock:
            self._read += n

    def get(self, path: str) -> bytes:
        data = super().get(path)
        self._read_bytes(len(data))
        return data

    def get_range(self, path: str, start: int, end: int) -> bytes:
        data = super().get_range(path, start, end)
        self._read_bytes(len(data))
        return data

    def get_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        out = super().get_ranges(path, ranges)
        self._read_bytes(sum(len(b) for b in out))
        return out

    def put(
        self,
        path: str,
        data: bytes | bytearray | memoryview,
        *,
        create: bool = False,
        attributes: Mapping[str, str] | None = None,
    ) -> None:
        super().put(path, data, create=create, attributes=attributes)
        n = memoryview(data).nbytes
        with self._lock:
            self._written += n

    def list(self, prefix: str, *, offset: str | None = None) -> Iterator[ObjectMeta]:
        with self._lock:
            self._requests["list"] += 1
        return self._list(prefix, offset)

    def _list(self, prefix: str, offset: str | None) -> Iterator[ObjectMeta]:
        try:
            for meta in self.inner.list(prefix, offset=offset):
                with self._lock:
                    self._listed += 1
                yield meta
        except GeneratorExit:
            raise
        except BaseException:
            with self._lock:
                self._errors["list"] += 1
            raise


class LatencyStore(PerCallStore):
    """Adds ``base_s`` plus up to ``jitter_s`` (uniform) before every call.

    Sleeps on the injected clock, so a manual clock makes a slow store
    instantaneous and still measurable; the seeded ``rng`` makes the jitter
    reproducible.
    """

    def __init__(
        self,
        inner: ObjectStore,
        clock: Clock,
        base_s: float,
        jitter_s: float = 0.0,
        rng: random.Random | None = None,
    ) -> None:
        if base_s < 0 or jitter_s < 0:
            raise InvalidArgument("LatencyStore base_s and jitter_s must be >= 0")
        super().__init__(inner)
        self._clock = clock
        self._base = base_s
        self._jitter = jitter_s
        self._rng = rng if rng is not None else random.Random(0)
        self._lock = threading.Lock()

    def _call(self, kind: str, fn: Callable[[], T], requests: int = 1) -> T:
        for _ in range(requests):
            delay = self._base
            if self._jitter:
                with self._lock:
                    delay += self._rng.uniform(0.0, self._jitter)
            if delay > 0:
                self._clock.sleep(delay)
        return fn()
