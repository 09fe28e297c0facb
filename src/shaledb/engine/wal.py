"""The write-ahead log's writer: buffered writes become immutable WAL SST objects
(the object codec is :mod:`shaledb.format.wal`).

Writers append to an in-memory buffer under the database's write lock (so WAL
order is sequence order). One flusher thread cuts the buffer into *segments*
and writes each as ``wal/<id>.sst`` with create-if-absent. Ids are given in
order when a segment is cut; up to ``max_in_flight`` PUTs run at once
(``Settings.wal_max_in_flight``), so on a store with long round trips a durable
write that arrives while a PUT is in flight goes out at once instead of waiting
a round trip for it. A segment counts as written -- its waiters wake, its
sequence numbers become durable -- only once it and every earlier segment are
written, so acknowledgement order and what a crash keeps are those of one PUT
at a time: a crash can leave object N+1 written and N not, and then nothing
in N+1 was acknowledged; the next writer fences at the hole and never replays
N+1 (``recovery.write_fence``, :class:`EpochGate`).

When a segment is flushed:
* on ``flush_interval_s`` for non-durable writes;
* at once when a durable write, ``flush()`` or a full buffer asks (group
  commit: everything buffered while a flush is in flight goes into the next
  one, so concurrent durable writers share round trips);
* when the memtable freezes (the buffer is *sealed* so a WAL object never
  mixes two memtables' writes, which is what lets an L0 flush say "every WAL
  id <= N is in SSTs").

Value journal: with ``value_separation_threshold`` set, every WAL object that
holds entries is also a value-journal file (recorded in the manifest by the
L0 flush that covers it, see ``flush.py``). When a segment is encoded the
writer records, for each value at or above the threshold, a pointer to its
stored block and index in the segment's memtable (``Memtable.locs``, the
segment's *sink*), before the segment counts as durable.

Fencing: if a create finds an object already at our id, the object's
``writer_epoch`` says who took the slot. A newer epoch means a newer writer
fenced us: every later write fails with :class:`FencedError`. Any failure
stops the flusher and is reported to every waiter and to the database; a
failure of any PUT in flight fails the writer, and no segment after the first
that is not written is acknowledged.
"""

from __future__ import annotations

import io
import logging
import random
import threading
from array import array
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from ..clock import Clock
from ..errors import AlreadyExists, ClosedError, CorruptionError, FencedError, ShaleError
from ..format import paths
from ..format.coding import crc32c_of
from ..format.journal import wal_ref
from ..format.out_buffers import OutBuffers
from ..format.wal import Locations, encode_wal_columns, is_empty_wal, locate_values, wal_object_epoch
from ..manifest.model import JournalFile, TrackedWal
from ..settings import Settings
from ..store.base import ObjectStore
from .latch import Latch

log = logging.getLogger("shaledb.wal")

SLOW_PUT_S = 0.002
"""A WAL PUT slower than this (a cloud store's round trip, not a local file's) makes the main
thread's durable writes wait for the flusher thread rather than PUT themselves, so Ctrl-C
during one only ends the wait (``WalWriter._put_here``)."""


class WalSegment:
    """The entries of one WAL object, as columns (``WalWriter``'s buffer when it was cut)."""

    __slots__ = ("done", "id", "keys", "kinds", "pays", "seqs", "sink")

    def __init__(
        self,
        wal_id: int,
        keys: list[bytes],
        seqs: array[int],
        kinds: bytearray,
        pays: list[bytes],
        sink: Locations | None,
        done: Latch,
    ) -> None:
        self.id = wal_id
        self.keys = keys
        self.seqs = seqs
        self.kinds = kinds
        self.pays = pays
        self.sink = sink
        self.done = done
        """Set once the object is written (or the WAL failed): wakes only this segment's waiters."""


def wal_object_bytes(settings: Settings) -> int:
    """Where the writer cuts a WAL object: ``wal_max_bytes``, or a sixteenth of
    ``max_unflushed_bytes`` (at least 256 KiB) if that is smaller. The object is
    built in memory beside the memtables, so a small write budget shrinks it too;
    the defaults (4 MiB of 256 MiB) are unchanged."""
    return min(settings.wal_max_bytes, max(256 * 1024, settings.max_unflushed_bytes // 16))


class _Flight:
    """A segment whose PUT was started: its encoded object and the PUT's outcome
    (True: written; False: an older writer's fence holds the slot)."""

    __slots__ = ("data", "ends", "fut", "offsets", "out", "seg")

    def __init__(
        self,
        seg: WalSegment,
        data: bytearray | memoryview,
        offsets: list[int],
        ends: list[int],
        out: io.BytesIO | None = None,
    ) -> None:
        self.seg = seg
        self.data = data
        self.out = out
        """The reused buffer ``data`` is a view of (:attr:`WalWriter.buffers`)."""
        self.offsets = offsets
        self.ends = ends
        self.fut: Future[bool] = Future()


class WalWriter:
    """Buffer, segment queue and flusher thread of one writer epoch."""

    def __init__(
        self,
        *,
        store: ObjectStore,
        clock: Clock,
        rng: random.Random,
        lock: threading.Lock,
        epoch: int,
        next_id: int,
        durable_seq: int,
        flush_interval_s: float,
        max_buffer_bytes: int,
        codec: int,
        block_size: int,
        on_failure: Callable[[BaseException], None],
        threshold: int | None = None,
        max_in_flight: int = 1,
    ) -> None:
        self.store = store
        self.max_in_flight = max(1, max_in_flight)
        self.threshold = threshold
        """Value-separation threshold (None: WAL objects are not journal files)."""
        self.sink: Locations | None = None
        """Where the current buffer's value locations go (the memtable's ``locs``)."""
        self.clock = clock
        self.rng = rng
        self.lock = lock
        self.epoch = epoch
        self.flush_interval_s = flush_interval_s
        self.max_buffer_bytes = max_buffer_bytes
        self.codec = codec
        self.block_size = max(block_size, 16 * 1024)
        self.on_failure = on_failure
        # Buffer (guarded by ``lock``): the entries ``(seq, kind, payload)`` of ``keys`` as
        # columns, the shape the object is encoded from (no per-entry tuple to take apart
        # on this thread; a batch extends each column with one C-level call).
        self.keys: list[bytes] = []
        self.seqs: array[int] = array("Q")
        self.kinds = bytearray()
        self.pays: list[bytes] = []
        self.nbytes = 0
        self.pending = Latch()
        """The buffer's latch (becomes its segment's ``done``): a durable write waits on it."""
        self._sealed: deque[WalSegment] = deque()
        self._flights: deque[_Flight] = deque()
        """PUTs started, in id order (only the flusher thread touches it, or with one PUT
        at a time whoever holds ``_put_lock``; empty whenever that lock is free)."""
        self._asked = False
        """A flush was asked for (durable write, ``flush()``, full buffer, seal): cut the buffer."""
        self._last_cut = clock.monotonic()
        self.buffers = OutBuffers(self.max_in_flight)
        """Where WAL objects are built: a buffer goes back once its object's PUT has landed
        and been acknowledged, so the next object's pages are in already (module
        ``format.out_buffers``; a store that keeps the bytes it was given keeps them)."""
        self._pool = (
            ThreadPoolExecutor(self.max_in_flight, thread_name_prefix="shaledb-wal-put")
            if self.max_in_flight > 1
            else None
        )
        self._put_lock = threading.Lock()
        """With one PUT at a time: held by whoever cuts, writes and acknowledges segments
        (the flusher thread, or a durable writer making its own PUT), so they go out
        one at a time in id order and ``_flights`` has one owner at a time."""
        self._main = threading.main_thread().ident
        """The main thread makes no PUT of its own on a slow store (``_put_here``): Ctrl-C
        raises there."""
        self._put_s = 0.0
        """How long the last WAL PUT took (``SLOW_PUT_S``)."""
        self._next_id = next_id
        self.limit_id = 1 << 64
        """Cutting the segment that takes ``_next_id`` to this id calls ``on_limit`` (the
        writer's memtable spans ``Settings.l0_max_wal_objects`` objects): checked once per
        object here instead of once per write in the writer."""
        self.on_limit: Callable[[], None] | None = None
        # Durability (guarded by ``_cv``).
        # An RLock: a KeyboardInterrupt in a main-thread wait (flush(), WriteHandle.wait_durable)
        # cannot make it release the lock while the flusher holds it (``latch.py``).
        self._cv = threading.Condition(threading.RLock())
        self.durable_seq = durable_seq
        self.durable_wal_id = next_id - 1
        self.objects_written = 0
        self.bytes_written = 0
        self.failure: BaseException | None = None
        self._written: list[TrackedWal] = []
        self._journal: list[JournalFile] = []
        self._wake = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="shaledb-wal", daemon=True)
        self._thread.start()

    # ----------------------------------------------------- under the db lock

    def cut_locked(self) -> WalSegment | None:
        """Turn the buffer into a segment with the next WAL id.

        Every call comes first and the buffer is swapped by plain assignments after them:
        a KeyboardInterrupt (Ctrl-C, raised in the main thread at a call) then finds the
        buffer either whole or cut, never a segment built and lost with its id taken (a hole
        in the WAL) or the buffer's entries in two segments. ``on_limit`` (the memtable
        freezes at the next write) is called first for the same reason.
        """
        keys = self.keys
        if not keys:
            return None
        if not len(keys) == len(self.seqs) == len(self.kinds) == len(self.pays):
            # A writer's entry half appended (an interrupt between its columns, which the
            # writer rewinds): encoding them would pair keys with other entries' values.
            raise CorruptionError(
                "the WAL buffer's columns differ in length (a write was cut short, by a "
                "KeyboardInterrupt?): stopping rather than writing keys with the wrong values"
            )
        if self._next_id + 1 >= self.limit_id and self.on_limit is not None:
            self.on_limit()
        fresh = Latch()
        seqs: array[int] = array("Q")
        kinds = bytearray()
        seg = WalSegment(self._next_id, keys, self.seqs, self.kinds, self.pays, self.sink, self.pending)
        self.pending = fresh
        self._next_id += 1
        self.keys = []
        self.seqs = seqs
        self.kinds = kinds
        self.pays = []
        self.nbytes = 0
        return seg

    def rewind_locked(self, n: int) -> None:
        """Drop what a write appended to the buffer past its first ``n`` entries: an
        exception (a KeyboardInterrupt) cut the write short between its columns, which
        would otherwise stay misaligned (``cut_locked`` refuses them)."""
        del self.keys[n:]
        del self.seqs[n:]
        del self.kinds[n:]
        del self.pays[n:]

    def seal_locked(self) -> int:
        """Seal the buffer (a memtable is freezing); the last WAL id in use."""
        seg = self.cut_locked()
        if seg is not None:
            self._sealed.append(seg)
            self._ask()
        return self._next_id - 1

    def cut_full_locked(self) -> None:
        """The buffer holds ``max_buffer_bytes``: cut it into a segment now and ask the
        flusher to write it.

        Only asking left the cut to the flusher thread, which waits for the interpreter
        while the writer goes on: under a stream of non-durable batches a WAL object grew
        to a whole memtable (64 MiB instead of 4 MiB). Cut here, objects stay about
        ``max_buffer_bytes``, so the reused buffers they are built in
        (``format.out_buffers``) stay that size too.
        """
        self.seal_locked()

    @property
    def next_id(self) -> int:
        return self._next_id

    # ------------------------------------------------------------- any thread

    def request_flush(self) -> None:
        self._ask()

    @property
    def flush_asked(self) -> bool:
        """A cut was asked for and not made yet (under ``lock``: the next cut takes
        everything buffered so far). A writer whose batch filled the buffer asks only
        if this is False: while the flusher waits for the interpreter, every batch
        would otherwise set the wake-up event again."""
        return self._asked

    def _ask(self) -> None:
        self._asked = True
        self._wake.set()

    def wait_durable(self, seq: int, timeout: float | None = None, latch: Latch | None = None) -> bool:
        """Block until ``seq`` is durable; False on timeout. Raises the failure.

        ``latch`` is the ``pending`` event read under the write lock when ``seq``
        was buffered: waiting on it wakes this thread only when its own segment
        is written, where the condition would wake every waiter on every write
        (with many writer threads, those wake-ups cost more than the writes).
        """
        if latch is not None:
            return self._wait_latch(seq, timeout, latch)
        with self._cv:
            if self.durable_seq >= seq:
                return True
            self._ask()
            deadline = None if timeout is None else self.clock.monotonic() + timeout
            while self.durable_seq < seq:
                if self.failure is not None:
                    raise _surface(self.failure)
                if self._stopping and not self._thread.is_alive():
                    raise ClosedError("database closed before the write became durable")
                remaining = None if deadline is None else deadline - self.clock.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cv.wait(0.5 if remaining is None else min(remaining, 0.5))
            return True

    def _wait_latch(self, seq: int, timeout: float | None, latch: Latch) -> bool:
        if self.durable_seq >= seq:
            return True
        if (
            timeout is None
            and self._pool is None
            and (self._put_s < SLOW_PUT_S or self._main != threading.get_ident())
            and self._put_here(seq)
        ):
            return True
        self._ask()
        deadline = None if timeout is None else self.clock.monotonic() + timeout
        while True:
            remaining = None if deadline is None else deadline - self.clock.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            latch.wait(0.5 if remaining is None else min(remaining, 0.5))
            if self.durable_seq >= seq:
                return True
            if self.failure is not None:
                raise _surface(self.failure)
            if self._stopping and not self._thread.is_alive():
                raise ClosedError("database closed before the write became durable")

    def _put_here(self, seq: int) -> bool:
        """With one PUT at a time and no PUT in progress, write the segments up to ``seq``
        on this (the durable writer's) thread; False if someone else is writing.

        Handing the PUT to the flusher thread and being woken by it costs two thread
        wake-ups per durable write (measured: about 0.1-0.3 ms of a round trip on
        a busy 2-core machine, docs/benchmarks.md "S3 profile"); the caller would only
        wait meanwhile. Segments go out exactly as the flusher sends them: sealed ones
        first, then the buffer, in id order under ``_put_lock``, each acknowledged
        when written; a failure stops the writer as one in the flusher does.

        Not on the main thread when PUTs are slow (``SLOW_PUT_S``: S3, GCS, Azure): Ctrl-C
        raises KeyboardInterrupt there, at any call, and one that landed in this bookkeeping
        (mid-PUT, inside a future's ``set_result``, in an ``except`` clause) cannot be
        undone: the writer stops on it ("database stopped after a background failure:
        KeyboardInterrupt"). The main thread's durable write waits for the flusher instead,
        and an interrupt there only ends the wait: the write is not acknowledged and still
        goes out with its segment. Where PUTs are fast (a local directory, memory) the hand-off
        would double a durable put's time (measured 0.10 -> 0.20 ms on memory, 0.12 -> 0.22 ms
        on a local directory, main thread, idle machine) and an interrupt rarely lands in a
        PUT of a tenth of a millisecond, so the main thread makes its own there.
        """
        if not self._put_lock.acquire(blocking=False):
            return False
        try:
            if self.failure is not None or self._stopping:
                return False
            while self.durable_seq < seq:
                with self.lock:
                    if self._sealed:
                        seg: WalSegment | None = self._sealed.popleft()
                    else:  # as the flusher's cut: it answers every ask made so far
                        self._asked = False
                        self._last_cut = self.clock.monotonic()
                        seg = self.cut_locked()
                if seg is None:  # not ours to write (cannot happen: ours is buffered or sealed)
                    return False
                self._submit(seg)
                self._land_done()
            return True
        except BaseException as exc:
            self._fail(exc)  # every failure stops the WAL
            self._wake.set()  # the flusher thread sees the failure and ends
            if not isinstance(exc, Exception):
                raise  # (a SimulatedCrash of this thread): the writer is stopped, the caller sees it
            err = _surface(self.failure or exc)
        finally:
            self._put_lock.release()
        raise err

    def wait_wal_id(self, wal_id: int) -> None:
        """Block until every WAL object up to ``wal_id`` is written."""
        with self._cv:
            while self.durable_wal_id < wal_id:
                if self.failure is not None:
                    raise _surface(self.failure)
                self._ask()
                self._cv.wait(0.5)

    def drain_written(self) -> list[TrackedWal]:
        """WAL objects written since the last call (for the manifest's tracking)."""
        with self._cv:
            out = self._written
            self._written = []
            return out

    def note_written(self, wals: list[TrackedWal]) -> None:
        """Give back objects the manifest did not take (or replayed at open)."""
        with self._cv:
            self._written = sorted(wals + self._written, key=lambda w: w.id)

    def drain_journal(self, upto: int) -> list[JournalFile]:
        """Journal files (WAL objects with entries) with ids up to ``upto``, in id order."""
        with self._cv:
            out = [j for j in self._journal if int(j.id) <= upto]
            self._journal = [j for j in self._journal if int(j.id) > upto]
            return out

    def note_journal(self, files: list[JournalFile]) -> None:
        """Give back journal files the manifest did not take (or replayed at open)."""
        with self._cv:
            merged = {j.id: j for j in files + self._journal}
            self._journal = [merged[k] for k in sorted(merged)]

    def stop(self) -> None:
        """Flush what is buffered and stop the thread."""
        self._stopping = True
        self._ask()
        self._thread.join()

    # ----------------------------------------------------------- the thread

    def _run(self) -> None:
        wait = self.clock.wait
        one_at_a_time = self._pool is None
        try:
            while True:
                stopping = self._stopping
                idle = one_at_a_time or not self._flights
                due = idle
                if not stopping:
                    if idle:
                        woken = wait(self._wake, self.flush_interval_s)
                        # With one PUT at a time a durable writer may have cut and written
                        # what a wake-up asked for (clearing the ask): then only an ask
                        # still pending or the interval cuts, not the stale wake-up.
                        due = not (one_at_a_time and woken)
                    else:  # a PUT landing or a request wakes the thread
                        self._wake.wait(self.flush_interval_s)
                self._wake.clear()
                if one_at_a_time:
                    self._put_lock.acquire()  # a durable writer may be making its own PUT
                try:
                    if self.failure is not None:
                        return  # a writer's own PUT failed: the WAL is stopped
                    self._pump(due=due, drain=stopping)
                except BaseException as exc:  # noqa: BLE001 - every failure stops the WAL
                    self._fail(exc)
                    return
                finally:
                    if one_at_a_time:
                        self._put_lock.release()
                if stopping:
                    return
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)

    def _pump(self, *, due: bool, drain: bool) -> None:
        """Acknowledge the written prefix, then start PUTs while the window has room.

        Sealed segments always go out; the buffer is cut when a flush was asked
        for, when ``flush_interval_s`` passed since the last cut, after an idle
        wait, or when stopping (``drain``, which also waits for every PUT).
        """
        while True:
            self._land_done()
            while len(self._flights) < self.max_in_flight:
                cut = due or drain or self._asked
                if not cut and self.clock.monotonic() - self._last_cut >= self.flush_interval_s:
                    cut = True
                with self.lock:
                    if self._sealed:
                        seg: WalSegment | None = self._sealed.popleft()
                    elif cut:
                        self._asked = False
                        self._last_cut = self.clock.monotonic()
                        seg = self.cut_locked()
                    else:
                        seg = None
                if seg is None:
                    break
                due = False  # one cut per wake-up: what arrives later waits for the next one
                self._submit(seg)
            if not self._flights:
                return
            if not drain and len(self._flights) < self.max_in_flight:
                return
            if not drain and not self._flights[0].fut.done():
                return  # the window is full: the oldest PUT landing wakes the thread
            self._flights[0].fut.exception()  # waits; the result is read by _land_done

    def _submit(self, seg: WalSegment) -> None:
        out = self.buffers.take()
        data, offsets, ends = encode_wal_columns(
            seg.keys,
            seg.seqs,
            seg.kinds,
            seg.pays,
            epoch=self.epoch,
            nonce=self.rng.getrandbits(128).to_bytes(16, "little"),
            created_at_ms=int(self.clock.now() * 1000),
            codec=self.codec,
            block_size=self.block_size,
            out=out,
        )
        f = _Flight(seg, data, offsets, ends, out)
        self._flights.append(f)
        if self._pool is None:
            try:
                f.fut.set_result(self._put(seg.id, data))
            except BaseException as exc:  # noqa: BLE001 - raised in order by _land_done
                f.fut.set_exception(exc)
            return
        f.fut = self._pool.submit(self._put, seg.id, data)
        f.fut.add_done_callback(lambda _: self._wake.set())

    def _put(self, wal_id: int, data: bytearray | memoryview) -> bool:
        """Create ``wal/<wal_id>``: True once it holds our object, False if an older
        writer's fence holds the slot; raises if a newer writer fenced us."""
        started = self.clock.monotonic()
        try:
            self.store.put(paths.wal_path(wal_id), data, create=True)
            return True
        except AlreadyExists:
            return self._collision(wal_id, data)
        finally:
            self._put_s = self.clock.monotonic() - started

    def _land_done(self) -> None:
        """Acknowledge, in id order, every segment whose PUT and every earlier one landed."""
        while self._flights and self._flights[0].fut.done():
            f = self._flights.popleft()
            if not f.fut.result():  # raises the PUT's failure: the writer stops
                self._requeue(f)
                continue
            self._landed(f)
            if f.out is not None and isinstance(f.data, memoryview):
                self.buffers.give(f.out, f.data)  # its PUT returned and nothing here reads it any more

    def _landed(self, f: _Flight) -> None:
        seg = f.seg
        data = f.data
        log.debug("wrote WAL object %d: %d entries, %d bytes", seg.id, len(seg.keys), len(data))
        tracked = TrackedWal(seg.id, len(data), crc32c_of(data))
        thr = self.threshold
        seqs = seg.seqs
        if thr is not None and seqs and seg.sink is not None:
            ents = list(zip(seqs, seg.kinds, seg.pays))
            locate_values(seg.id, seg.keys, ents, f.offsets, f.ends, thr, seg.sink, data)
        with self._cv:
            self.durable_wal_id = seg.id
            self.objects_written += 1
            self.bytes_written += len(data)
            if seqs:
                self.durable_seq = max(self.durable_seq, seqs[-1])
                if thr is not None:
                    self._journal.append(
                        JournalFile(wal_ref(seg.id), len(data), len(seqs), seqs[0], seqs[-1])
                    )
            self._written.append(tracked)
            self._cv.notify_all()
        seg.done.set()

    def _collision(self, wal_id: int, ours: bytes | bytearray | memoryview) -> bool:
        """Someone's object is at our slot: True if it is ours, False to skip the slot; else raise."""
        path = paths.wal_path(wal_id)
        theirs = self.store.get(path)
        if theirs == ours:
            return True  # our own earlier attempt landed
        try:
            other = wal_object_epoch(theirs)
        except CorruptionError as exc:
            raise exc.with_path(path) from exc
        if other is not None and other > self.epoch:
            raise FencedError(
                f"writer epoch {other} took over (found {path}); this writer (epoch {self.epoch}) stops"
            )
        if other is None:
            raise FencedError(f"a fencing object occupies {path}; another writer took over")
        if other < self.epoch and is_empty_wal(theirs):
            # An older writer's fence, written after ours: it claimed its epoch
            # before us but listed the WAL after our fence, and its open then
            # failed on our newer epoch. Its slot holds no writes; step over it
            # (docs/design/writer-open-and-recovery.md: a newer writer's fence).
            return False
        raise CorruptionError(
            f"WAL slot taken by epoch {other} while this writer holds epoch {self.epoch}", path
        )

    def _requeue(self, first: _Flight) -> None:
        """An older writer's fence holds ``first``'s slot: write it and every segment
        after it again, in order, above the ones in flight (ids stay contiguous).

        The later segments may have landed already at their ids; their copies
        written again come after them, so replaying the log in id order ends
        with every segment's writes in their order, and each is acknowledged
        only once its new copy (and all before it) is written.

        A memtable frozen before the move keeps its recorded last WAL id, now
        lower than its last object: its L0 flush may then start before that
        object is written (the write is still acknowledged only once it is)
        and the next open replays more objects, whose entries are already in
        L0 and skipped by sequence number. Both are harmless, and skips
        happen only after a race of opening writers.
        """
        for f in self._flights:
            f.fut.exception()  # wait for every PUT in flight
        later = list(self._flights)
        self._flights.clear()
        for f in later:
            f.fut.result()  # a later failure still stops the writer
        segs = [first.seg] + [f.seg for f in later]
        shift = len(segs)
        log.warning(
            "WAL slot %d holds an older writer's fence; writing %d object(s) again from %d",
            first.seg.id,
            shift,
            first.seg.id + shift,
        )
        with self.lock:
            base = first.seg.id + shift
            for s in self._sealed:
                s.id += shift
            self._next_id += shift
            for i, seg in enumerate(segs):
                seg.id = base + i
            self._sealed.extendleft(reversed(segs))

    def _fail(self, exc: BaseException) -> None:
        log.error("WAL flusher stopped: %s", exc)
        with self._cv:
            self.failure = exc
            self._cv.notify_all()
        # The database records the failure before any waiter wakes: a writer woken with the
        # error and writing again at once must find the handle failed, not still open.
        try:
            self.on_failure(exc)
        except Exception:
            log.exception("failure callback raised")
        with self.lock:
            latches = [s.done for s in self._sealed] + [self.pending]
        latches.extend(f.seg.done for f in self._flights)
        for latch in latches:
            latch.set()


def _surface(exc: BaseException) -> BaseException:
    """The error a waiter sees for a WAL failure."""
    if isinstance(exc, ShaleError):
        return exc
    err = ClosedError(f"the WAL writer stopped: {type(exc).__name__}: {exc}")
    err.__cause__ = exc
    return err
