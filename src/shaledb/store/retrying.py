"""Retries of transient store failures, and the ambiguous conditional put.

Only :class:`~shaledb.errors.Unavailable` is retried, with exponential backoff
and jitter, bounded by ``RetryOptions.max_attempts`` and ``timeout_s``; then
the call raises ``Unavailable`` naming the attempts. Each retry is logged at
DEBUG on the ``shaledb.store`` logger with its attempt and delay. An outage is
two lines per store: the first call still failing after :data:`SLOW_RETRY_S`
says so at WARNING, and the first failed call that then gets an answer says at
INFO that the store answers again (a minute-long outage used to print a WARNING
every two seconds for each call waiting on it: a reader prefetching 16 WAL
objects printed 16 lines a second).
:class:`~shaledb.errors.EndpointUnreachable` (a store that never answered: a
wrong endpoint, most likely) is an ``Unavailable`` that is not retried, like
the set-up mistakes ``PermissionDenied`` and ``BucketNotFound``. Answers that are facts
about the data (AlreadyExists, PreconditionFailed, ObjectNotFound,
NotSupported, InvalidArgument) are never retried.

Plain puts, deletes and overwriting copies are idempotent, so retrying them is
safe. A conditional put (``create=True``) is not: when an attempt fails after
the store applied it (the response was lost), the retry finds our own object
and gets ``AlreadyExists``. Reporting that as a lost race makes a live writer
believe it was fenced (slatedb#766). So every conditional put carries a unique
put id, and an ``AlreadyExists`` is checked before it is believed:

* where the store keeps attributes, the put id is stored as the attribute
  :data:`~shaledb.store.base.PUT_ID_ATTRIBUTE`; the object is ours iff the
  stored attribute equals our id. This check runs on every conflict, since
  the backend itself may retry internally and hide the ambiguity from us.
* where it does not (a local directory), the stored bytes are compared with
  ours, but only after an attempt of this call failed ambiguously.

The byte comparison relies on a contract with the callers: **every payload
shaledb writes with ``create=True`` (manifests, WAL objects, fencing objects,
checkpoint records) embeds a nonce or epoch unique to that write**, so two
different writers never produce equal bytes and equality proves the object is
ours. An empty payload cannot carry a nonce, so it is never claimed: the
conflict is reported, which costs availability (the caller re-reads and moves
on) but never safety (two writers both believing they won).

Overwriting copies are retried like puts; a ``copy(create=True)`` that failed
ambiguously is resolved by comparing the destination's bytes with the source.
"""

from __future__ import annotations

import logging
import math
import random
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TypeVar

from ..clock import SYSTEM_CLOCK, Clock
from ..errors import AlreadyExists, EndpointUnreachable, ObjectNotFound, ShaleError, Unavailable
from ..format.paths import check_prefix
from ..settings import RetryOptions
from .base import PUT_ID_ATTRIBUTE, ObjectMeta, ObjectStore
from .obstore_store import ObstoreStore
from .watchdog import WATCHDOG
from .wrappers import StoreWrapper, find_wrapper

_log = logging.getLogger(__name__)
_retry_log = logging.getLogger("shaledb.store")
SLOW_RETRY_S = 5.0
"""A call that has failed this long reports the outage at WARNING, unless one is reported."""
T = TypeVar("T")
WATCH_MAX_BYTES = 8 << 20
"""Transfers up to this size are watched (:mod:`.watchdog`); a larger one may rightly take
longer than the watchdog's few seconds on a slow link, and is left to the request timeout."""


class _Call:
    """One call's retry budget, and whether it was reported as failing."""

    __slots__ = ("attempt", "deadline", "started", "token", "warned", "what")

    def __init__(self, what: str, started: float, timeout_s: float, token: int | None) -> None:
        self.what = what
        self.started = started
        self.deadline = started + timeout_s
        self.attempt = 0
        self.warned = False
        self.token = token  # the watchdog's, re-armed for each attempt

    def restart(self, now: float, timeout_s: float) -> None:
        """A fresh budget (a listing made progress after failures it has reported)."""
        self.attempt, self.started, self.deadline = 1, now, now + timeout_s
        self.warned = False


class RetryingStore(StoreWrapper):
    """Retries ``Unavailable`` and resolves ambiguous conditional puts.

    ``clock`` does the waiting (a manual clock makes backoff instantaneous);
    ``rng`` draws the jitter and the put ids, so a seeded run is reproducible.
    ``ambiguities_resolved`` counts conditional writes that met their own
    object after a retry and were reported as successful; ``retries`` counts
    attempts after the first.
    """

    def __init__(
        self,
        inner: ObjectStore,
        options: RetryOptions | None = None,
        clock: Clock = SYSTEM_CLOCK,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(inner)
        self.options = options if options is not None else RetryOptions()
        self._clock = clock
        self._rng = rng if rng is not None else random.Random()
        self._lock = threading.Lock()
        self._resolved = 0
        self._retries = 0
        self._exhausted_n = 0
        self._failed_at: float | None = None
        """Monotonic time of the last failed attempt of any call (:meth:`seconds_since_failure`)."""
        # When the reported outage's first call began failing; None while none is reported.
        self._outage_since: float | None = None
        store: ObstoreStore | None = find_wrapper(inner, ObstoreStore)
        service = store.service if store is not None else None
        # Calls on a cloud store are watched (a store that never answers is reported after a
        # few seconds, not at the request timeout); a local or memory store is not.
        self._watch = (service.where(), service.request_timeout) if service is not None else None

    @property
    def ambiguities_resolved(self) -> int:
        return self._resolved

    @property
    def retries(self) -> int:
        return self._retries

    def seconds_since_failure(self) -> float:
        """Seconds since an attempt of a call of this store last failed (inf if none has).

        A process that has just seen its store fail cannot tell a peer that stopped renewing a
        lease from one that could not reach the store either (``compaction.role.Standby``)."""
        failed = self._failed_at
        return math.inf if failed is None else self._clock.monotonic() - failed

    @property
    def exhausted(self) -> int:
        """Calls that failed for good: their retries were spent (or not allowed)."""
        return self._exhausted_n

    def new_put_id(self) -> str:
        with self._lock:
            return f"{self._rng.getrandbits(128):032x}"

    def _backoff(self, attempt: int) -> float:
        opts = self.options
        base = min(opts.max_backoff_s, opts.initial_backoff_s * (2 ** min(attempt - 1, 62)))
        with self._lock:
            return float(base / 2 + self._rng.uniform(0.0, base / 2))

    def _wait_or_give_up(self, call: _Call, exc: Unavailable) -> bool:
        """Sleep before the next attempt of ``call``; False when the budget is spent or ``exc``
        is not transient. Every failed attempt of every kind of call (reads, conditional
        creates, listings) comes here, so this is where :meth:`seconds_since_failure` learns of it."""
        now = self._clock.monotonic()
        self._failed_at = now
        if isinstance(exc, EndpointUnreachable) or call.attempt >= self.options.max_attempts:
            return False
        delay = self._backoff(call.attempt)
        if now + delay > call.deadline:
            return False
        with self._lock:
            self._retries += 1  # (counted once it will be made: a retry past the deadline is not)
        spent = now - call.started
        if spent >= SLOW_RETRY_S and not call.warned and self._report_outage(call):
            # Past a few seconds the caller is waiting on a store that does not answer (an
            # endpoint that accepts connections and stays silent fails each attempt only at
            # its request timeout): say so once, instead of a long silence before the error
            # (and instead of a line per retry and per call, which buried everything else).
            _retry_log.warning(
                "%s: %s has failed for %.0fs (attempt %d of %d: %s); retrying for up to %.0fs in all "
                "(RetryOptions.timeout_s)",
                self.describe(),
                call.what,
                spent,
                call.attempt,
                self.options.max_attempts,
                exc,
                self.options.timeout_s,
            )
        elif _retry_log.isEnabledFor(logging.DEBUG):
            _retry_log.debug(
                "%s: %s failed (attempt %d of %d), retrying in %.3fs: %s",
                self.describe(),
                call.what,
                call.attempt,
                self.options.max_attempts,
                delay,
                exc,
            )
        if call.token is None or self._watch is None:
            self._clock.sleep(delay)
            return True
        # The watchdog reports an attempt that waits long on a silent store; a backoff is no
        # such wait, and a store failing fast is the WARNING above's to report.
        WATCHDOG.pause(call.token)
        try:
            self._clock.sleep(delay)
        finally:
            WATCHDOG.begin(self._watch[0], call.what, self._watch[1], call.token)
        return True

    def _report_outage(self, call: _Call) -> bool:
        """True if ``call`` is the first to report the store failing (it logs the WARNING)."""
        call.warned = True
        with self._lock:
            if self._outage_since is not None:
                return False
            self._outage_since = call.started
            return True

    def _answered(self, call: _Call) -> None:
        """``call`` got an answer (a result, or an error that is not an outage): after failed
        attempts, that ends a reported outage."""
        if call.attempt == 1 or self._outage_since is None:
            return
        with self._lock:
            since, self._outage_since = self._outage_since, None
        if since is not None:
            _retry_log.info(
                "%s: the store answers again (%s, attempt %d); it failed for %.0fs",
                self.describe(),
                call.what,
                call.attempt,
                self._clock.monotonic() - since,
            )

    def _exhausted(self, call: _Call, last: Unavailable) -> Unavailable:
        with self._lock:
            self._exhausted_n += 1
        if isinstance(last, EndpointUnreachable):
            return last
        took = self._clock.monotonic() - call.started
        err = Unavailable(
            f"{self.describe()}: {call.what} failed after {call.attempt} attempt(s) in {took:.3f}s; "
            f"the store is unreachable, retry later (last error: {last})"
        )
        err.__cause__ = last
        return err

    def _retry(self, what: str, fn: Callable[[], T], *, watch: bool = True) -> T:
        """``fn`` retried on Unavailable; ``watch=False`` for a call that may rightly take long
        (a large transfer, a server-side copy): the watchdog would report it as a silent store."""
        if self._watch is None or not watch:
            return self._retry_loop(what, fn, None)
        token = WATCHDOG.begin(self._watch[0], what, self._watch[1])
        try:
            return self._retry_loop(what, fn, token)
        finally:
            WATCHDOG.end(token)

    def _retry_loop(self, what: str, fn: Callable[[], T], token: int | None) -> T:
        call = _Call(what, self._clock.monotonic(), self.options.timeout_s, token)
        while True:
            call.attempt += 1
            try:
                result = fn()
            except Unavailable as exc:
                if not self._wait_or_give_up(call, exc):
                    raise self._exhausted(call, exc) from exc
                continue
            except ShaleError:
                self._answered(call)  # (ObjectNotFound after an outage: the store answers)
                raise
            self._answered(call)
            return result

    def get(self, path: str) -> bytes:
        return self._retry(f"get {path}", lambda: self.inner.get(path))

    def get_range(self, path: str, start: int, end: int) -> bytes:
        return self._retry(
            f"get_range {path}",
            lambda: self.inner.get_range(path, start, end),
            watch=end - start <= WATCH_MAX_BYTES,
        )

    def get_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        return self._retry(
            f"get_ranges {path}",
            lambda: self.inner.get_ranges(path, ranges),
            watch=sum(e - s for s, e in ranges) <= WATCH_MAX_BYTES,
        )

    def head(self, path: str) -> ObjectMeta:
        return self._retry(f"head {path}", lambda: self.inner.head(path))

    def attributes(self, path: str) -> dict[str, str]:
        return self._retry(f"attributes {path}", lambda: self.inner.attributes(path))

    def delete(self, path: str) -> None:
        self._retry(f"delete {path}", lambda: self.inner.delete(path))

    def delete_many(self, paths: Sequence[str]) -> None:
        if paths:  # idempotent: a retry deletes again what the failed attempt may have deleted
            self._retry(f"delete_many {paths[0]} (+{len(paths) - 1})", lambda: self.inner.delete_many(paths))

    def put(
        self,
        path: str,
        data: bytes | bytearray | memoryview,
        *,
        create: bool = False,
        attributes: Mapping[str, str] | None = None,
    ) -> None:
        if not create:
            self._retry(
                f"put {path}",
                lambda: self.inner.put(path, data, attributes=attributes),
                watch=memoryview(data).nbytes <= WATCH_MAX_BYTES,
            )
            return
        put_id = self.new_put_id()
        attrs = dict(attributes or {})
        if self.inner.supports_attributes:
            attrs[PUT_ID_ATTRIBUTE] = put_id
        self._create(
            f"put(create) {path}",
            lambda: self.inner.put(path, data, create=True, attributes=attrs or None),
            lambda ambiguous: self._put_was_ours(path, data, put_id, ambiguous),
            path,
            watch=memoryview(data).nbytes <= WATCH_MAX_BYTES,
        )

    def _create(
        self,
        what: str,
        write: Callable[[], None],
        was_ours: Callable[[bool], bool],
        path: str,
        *,
        watch: bool,
    ) -> None:
        """Retry the conditional write ``write`` (a put or copy with ``create=True``) on
        Unavailable. AlreadyExists after a failed attempt may be that attempt's own
        success: ``was_ours(ambiguous)`` decides (``ambiguous``: an attempt failed in a
        way that may have been applied); then the write counts as resolved."""
        if self._watch is None or not watch:
            self._create_loop(what, write, was_ours, path, None)
            return
        token = WATCHDOG.begin(self._watch[0], what, self._watch[1])
        try:
            self._create_loop(what, write, was_ours, path, token)
        finally:
            WATCHDOG.end(token)

    def _create_loop(
        self,
        what: str,
        write: Callable[[], None],
        was_ours: Callable[[bool], bool],
        path: str,
        token: int | None,
    ) -> None:
        call = _Call(what, self._clock.monotonic(), self.options.timeout_s, token)
        ambiguous = False
        while True:
            call.attempt += 1
            try:
                write()
            except AlreadyExists:
                self._answered(call)
                if was_ours(ambiguous):
                    self._count_resolved(path)
                    return
                raise
            except Unavailable as exc:
                ambiguous = True  # the request may have been applied
                if not self._wait_or_give_up(call, exc):
                    raise self._exhausted(call, exc) from exc
                continue
            except ShaleError:
                self._answered(call)
                raise
            self._answered(call)
            return

    def _put_was_ours(
        self, path: str, data: bytes | bytearray | memoryview, put_id: str, ambiguous: bool
    ) -> bool:
        try:
            if self.inner.supports_attributes:
                stored = self._retry(f"attributes {path}", lambda: self.inner.attributes(path))
                return stored.get(PUT_ID_ATTRIBUTE) == put_id
            if not ambiguous or memoryview(data).nbytes == 0:
                return False
            return self._retry(f"get {path}", lambda: self.inner.get(path)) == bytes(data)
        except ObjectNotFound:
            return False  # deleted since: whatever it was, it is not ours to claim

    def _count_resolved(self, path: str) -> None:
        with self._lock:
            self._resolved += 1
        _log.info("%s: conditional write of %s was applied by an earlier attempt", self.describe(), path)

    def copy(self, src: str, dst: str, *, create: bool = False) -> None:
        if not create:
            self._retry(f"copy {src} -> {dst}", lambda: self.inner.copy(src, dst), watch=False)
            return
        self._create(
            f"copy(create) {src} -> {dst}",
            lambda: self.inner.copy(src, dst, create=True),
            lambda ambiguous: ambiguous and self._copy_was_ours(src, dst),
            dst,
            watch=False,
        )

    def _copy_was_ours(self, src: str, dst: str) -> bool:
        try:
            theirs = self._retry(f"get {dst}", lambda: self.inner.get(dst))
            ours = self._retry(f"get {src}", lambda: self.inner.get(src))
        except ObjectNotFound:
            return False
        return len(ours) > 0 and theirs == ours

    def list(self, prefix: str, *, offset: str | None = None) -> Iterator[ObjectMeta]:
        check_prefix(prefix)
        return self._list(prefix, offset)

    def _list(self, prefix: str, offset: str | None) -> Iterator[ObjectMeta]:
        # Listings are sorted, so a stream that fails midway resumes after the
        # last path it delivered instead of starting over.
        last = offset
        # On a cloud store the watchdog sees the listing while it waits for the store (the
        # first request of `shaledb stats` and of every open is a listing), not while the
        # caller holds an item; one token, so one report per listing.
        where, timeout = self._watch or ("", "")
        token = None if self._watch is None else WATCHDOG.begin(where, f"list {prefix!r}", timeout)
        call = _Call(f"list {prefix!r}", self._clock.monotonic(), self.options.timeout_s, token)
        try:
            while True:
                call.attempt += 1
                try:
                    for meta in self.inner.list(prefix, offset=last):
                        last = meta.path
                        if call.attempt > 1:  # progress: a fresh budget for the next failure
                            self._answered(call)
                            call.restart(self._clock.monotonic(), self.options.timeout_s)
                        if token is None:
                            yield meta
                            continue
                        WATCHDOG.pause(token)
                        yield meta
                        WATCHDOG.begin(where, f"list {prefix!r}", timeout, token)
                    self._answered(call)
                    return
                except Unavailable as exc:
                    if not self._wait_or_give_up(call, exc):
                        raise self._exhausted(call, exc) from exc
                except ShaleError:
                    self._answered(call)
                    raise
        finally:
            if token is not None:
                WATCHDOG.end(token)
