"""Memtable flushing: frozen memtables become L0 SSTs, then the manifest says so.

One thread per writer. For the oldest frozen memtable it
1. waits until every WAL object holding its writes is durable (an L0 row must
   never exist without its WAL copy, or a crash could resurrect it without a
   record of what preceded it);
2. stalls while the tree already has ``l0_max_ssts`` L0 SSTs (compaction must
   catch up; writers feel it through ``max_unflushed_bytes``);
3. writes ``compacted/<ULID>.sst`` (one per non-empty tree: the data tree
   and the index tree) and then a manifest version that adds them to L0 and
   advances ``replay_after_wal_id`` to the memtable's last WAL id, recording
   the WAL objects closed since the last update (docs/design/wal.md);
4. swaps the database's read view.

Key/value separation (``value_separation_threshold`` set): values the WAL
writer located (``Memtable.locs``) become POINTER entries in the L0 SST, and
the same manifest version lists the memtable's WAL objects as value-journal
files, so they are kept instead of becoming garbage below
``replay_after_wal_id``. Database options ride along in that version:
``journal_recovery`` (the recovery strategy), ``journal.complete`` (whether
the journal holds every write since the database was created, which
``rebuild-ledger`` needs) and ``index.enabled``.

While idle it polls the manifest to pick up other processes' changes (a
standalone compactor) and to notice a newer writer epoch.
"""

from __future__ import annotations

import io
import logging
import threading
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, replace

from ..errors import ClosedError, FencedError
from ..format import paths
from ..format.out_buffers import OutBuffers
from ..format.row import KIND_MERGE, KIND_POINTER, KIND_VALUE, TYPE_MASK
from ..format.sst import SST_TABLE, SstBuilder, SstProps
from ..manifest.edits import Edit
from ..manifest.model import JournalFile, Manifest, SstInfo, TrackedWal, Tree
from ..manifest.options import OPT_COMPACTOR_RELEASED, OPT_COMPLETE, OPT_INDEXED, OPT_RECOVERY
from .history import flush_history_options, memtable_versions
from .host import FlushHost, WriterHost
from .memtable import Memtable
from .merging import uncumulate
from .sstable import put_new_sst

log = logging.getLogger("shaledb.flush")


def build_l0(
    db: WriterHost, mem: Memtable, out: io.BytesIO | None = None
) -> tuple[bytearray | memoryview, SstProps] | None:
    """Encode a memtable as a table SST (None if it is empty); with ``out`` (a reused
    buffer, ``format.out_buffers``) built there and returned as a view of it."""
    if not mem.d and not mem.rdels:
        return None
    history = db.history is not None and mem.hist
    keys, seqs, kinds, payloads = memtable_versions(mem) if history else mem.sorted_items()
    if history and KIND_MERGE in kinds:
        uncumulate(keys, kinds, payloads)  # each version's own operands (shaledb.engine.merging)
    if mem.locs:
        to_pointers(keys, seqs, kinds, payloads, mem.locs)
    s = db.settings
    b = SstBuilder(
        kind=SST_TABLE,
        block_size=s.block_size_bytes,
        codec=db.codec,
        bloom_bits_per_key=s.bloom_bits_per_key,
        created_at_ms=int(db.clock.now() * 1000),
        nonce=db.rng.getrandbits(128).to_bytes(16, "little"),
        out=out,
        writer_epoch=db.epoch,  # GC keeps a young L0 of the current epoch not yet committed
    )
    b.add_many(keys, seqs, kinds, payloads)
    if mem.rdels:  # the range-del block; the SST's key range covers the tombstones
        frags = mem.range_frags()
        b.set_range_dels(frags, frags.starts[0], frags.ends[-1])
    return b.finish_buffer() if out is None else b.finish_view()


def write_l0(db: WriterHost, mem: Memtable, buffers: OutBuffers | None = None) -> SstInfo | None:
    """Build and write ``mem``'s L0 SST (None if it is empty), in a buffer from
    ``buffers`` if given: it goes back once the put has returned."""
    out = None if buffers is None else buffers.take()
    built = build_l0(db, mem, out)
    if built is None:
        if out is not None and buffers is not None:
            buffers.give(out, None)
        return None
    data, props = built
    info = put_new_sst(db.store, data, props, lambda: paths.new_ulid(db.clock.now(), db.rng))
    if out is not None and buffers is not None and isinstance(data, memoryview):
        buffers.give(out, data)
    return info


def to_pointers(
    keys: list[bytes],
    seqs: list[int],
    kinds: list[int],
    payloads: list[bytes],
    locs: dict[bytes, tuple[int, bytes, int]],
) -> None:
    """Turn located values into POINTER entries in place (extras stay in the entry)."""
    n = len(keys)
    for k, (seq, ptr, vlen) in locs.items():
        i = bisect_left(keys, k)
        if i < n and keys[i] == k and seqs[i] == seq and kinds[i] & TYPE_MASK == KIND_VALUE:
            p = payloads[i]
            kinds[i] = (kinds[i] & ~TYPE_MASK) | KIND_POINTER
            payloads[i] = p[: len(p) - vlen] + ptr


def merge_tracked(
    current: tuple[TrackedWal, ...], new: list[TrackedWal], replay_after: int, next_wal_id: int
) -> tuple[TrackedWal, ...]:
    """Tracked WALs after adding ``new`` and dropping obsolete ones."""
    by_id = {w.id: w for w in current}
    for w in new:
        by_id[w.id] = w
    return tuple(by_id[i] for i in sorted(by_id) if replay_after < i < next_wal_id)


@dataclass(frozen=True)
class InstallFlush(Edit):
    """Install a flushed memtable: its L0 SST(s) ``info``/``iinfo``, the WAL objects
    ``written`` and the journal files it referenced (:meth:`MemtableFlusher._add_l0`:
    fenced by the writer epoch, the view decorated by the writer)."""

    flusher: MemtableFlusher
    imm: Memtable
    info: SstInfo | None
    written: list[TrackedWal]
    iinfo: SstInfo | None
    journal: list[JournalFile]

    def apply(self, m: Manifest) -> Manifest | None:
        return self.flusher._add_l0(m, self.imm, self.info, self.written, self.iinfo, self.journal)


class MemtableFlusher:
    """The flush thread of one writer (see module docstring)."""

    def __init__(self, db: FlushHost, on_failure: Callable[[BaseException], None]) -> None:
        self.db = db
        self.on_failure = on_failure
        # An RLock: a KeyboardInterrupt in close()'s wait_flushed on the main thread cannot
        # make it release the lock while this thread holds it (``engine/latch.py``).
        self._cv = threading.Condition(threading.RLock())
        self._stopping = False
        self.buffers = OutBuffers(1)
        """Where L0 SSTs are built while memtables wait to be flushed one after another
        (``format.out_buffers``: the next SST's pages are in already); dropped when no
        memtable waits, so an idle writer does not hold a memtable's worth of memory."""
        self._thread = threading.Thread(target=self._run, name="shaledb-flush", daemon=True)
        self._thread.start()

    def notify(self) -> None:
        with self._cv:
            self._cv.notify_all()

    def stop(self) -> None:
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        self._thread.join()

    def wait_flushed(self, mem: Memtable) -> None:
        """Block until frozen memtable ``mem`` (and every older one) is in L0."""
        db = self.db
        with self._cv:
            while db.is_pending(mem):
                db.check_failure()
                if not self._thread.is_alive():
                    db.check_failure()
                    raise ClosedError("the memtable flusher stopped")
                self._cv.notify_all()
                self._cv.wait(0.2)

    # ------------------------------------------------------------ the thread

    def _run(self) -> None:
        db = self.db
        poll = db.settings.manifest_poll_interval_s
        last_poll = db.clock.monotonic()
        while True:
            with self._cv:
                if not db.oldest_imm() and not self._stopping:
                    self._cv.wait(min(poll, 0.25))
                stopping = self._stopping
            try:
                imm = db.oldest_imm()
                if imm is not None:
                    self.flush_one(imm)
                    if db.oldest_imm() is None:
                        self.buffers.clear()
                    continue
                if stopping:
                    return
                now = db.clock.monotonic()
                if now - last_poll >= poll:
                    last_poll = now
                    db.refresh_manifest()
            except BaseException as exc:  # noqa: BLE001 - a failed flush stops the writer
                log.error("memtable flush failed: %s", exc)
                self.on_failure(exc)
                with self._cv:
                    self._cv.notify_all()
                return

    def flush_one(self, imm: Memtable) -> None:
        db = self.db
        db.wal.wait_wal_id(imm.wal_id)
        self._stall_for_l0(db)
        started = db.clock.monotonic()
        info = write_l0(db, imm, self.buffers)
        iinfo = write_l0(db, imm.sub, self.buffers) if imm.sub is not None else None
        written = db.wal.drain_written()
        journal = db.wal.drain_journal(imm.wal_id)
        try:
            m = db.update_manifest(
                InstallFlush(self, imm, info, written, iinfo, journal), current=db.manifest
            )
        except BaseException:
            db.wal.note_written(written)
            db.wal.note_journal(journal)
            raise
        db.install_flushed(imm, m)
        db.metrics_state.flush_s.observe(db.clock.monotonic() - started)
        log.info(
            "flushed a memtable to L0 %s: %d entries, %d bytes (manifest %d, %d L0 SSTs)",
            info.id if info is not None else "(empty)",
            info.entries if info is not None else 0,
            info.size if info is not None else 0,
            m.id,
            len(m.data.l0),
        )
        with self._cv:
            self._cv.notify_all()

    def _add_l0(
        self,
        m: Manifest,
        imm: Memtable,
        info: SstInfo | None,
        written: list[TrackedWal],
        iinfo: SstInfo | None,
        journal: list[JournalFile],
    ) -> Manifest | None:
        db = self.db
        if m.writer_epoch != db.epoch:
            raise FencedError(
                f"writer epoch {m.writer_epoch} took over; this writer (epoch {db.epoch}) stops"
            )
        if (
            (info is not None or iinfo is not None)
            and m.last_l0_seq >= imm.last_seq
            and m.replay_after_wal_id >= imm.wal_id
        ):
            # Already applied: a retried CAS whose first attempt landed and was built on.
            # Adding the SST again would put old data above newer L0s.
            return None
        l0 = m.data.l0 if info is None else (info, *m.data.l0)
        replay_after = max(m.replay_after_wal_id, imm.wal_id)
        # WAL ids written so far, not ids handed out: a segment still in flight
        # may never land (crash), and the next writer fences at next_wal_id,
        # so counting it would leave a hole in the WAL that later opens
        # report as a missing object.
        next_wal = max(m.next_wal_id, db.wal.durable_wal_id + 1, replay_after + 1)
        tracked = (
            merge_tracked(m.tracked_wals, written, replay_after, next_wal)
            if db.settings.track_and_verify_wals
            else ()
        )
        index = m.index if iinfo is None else Tree((iinfo, *m.index.l0), m.index.runs)
        have = {j.id for j in m.journal}
        files = m.journal + tuple(j for j in journal if j.id not in have)
        nxt = replace(
            m,
            data=Tree(l0, m.data.runs),
            index=index,
            replay_after_wal_id=replay_after,
            last_l0_seq=max(m.last_l0_seq, imm.last_seq),
            next_wal_id=next_wal,
            tracked_wals=tracked,
            journal=files,
            options=flush_options(m, db, info is not None, imm.last_seq),
        )
        return db.decorate_manifest(nxt)

    def _stall_for_l0(self, db: FlushHost) -> None:
        limit = db.settings.l0_max_ssts
        warned = False
        while len(db.manifest.data.l0) >= limit:
            if db.closing or (self._stopping and db.failed()):
                return  # closing: one more L0 beats hanging; the next compaction absorbs it
            if not warned:
                warn_even_unconfigured(
                    log,
                    "L0 has %d SSTs (limit %d): flushes wait for compaction%s",
                    len(db.manifest.data.l0),
                    limit,
                    l0_stall_hint(
                        db.manifest,
                        embedded=db.settings.compactor is not None,
                        paused=db.compactor_paused,
                        url=db.store_for(0).describe(),
                    ),
                )
                warned = True
                db.metrics_state.l0_stalls += 1
            db.refresh_manifest()
            db.clock.sleep(0.05)


def l0_stall_hint(m: Manifest, *, embedded: bool, paused: bool = False, url: str = "URL") -> str:
    """What the L0-stall WARNING adds. Without an embedded compactor: whether a standalone
    one holds the role (then it is not keeping up) or none does -- it said "run `shaledb
    run-compactor`" while one was running, merely slow. With a paused embedded one: that a
    standalone compactor killed without closing keeps it paused, and the way out -- the
    writer waited for good with no word of why. The commands name the database (``url``)
    so they can be pasted as they are."""
    epoch = m.compactor_epoch
    if embedded:
        if not paused:
            return ""
        return (
            f" (the embedded compactor is paused: compactor epoch {epoch} holds the role; if that "
            f"standalone compactor died without closing, `shaledb --path {url} run-compactor --once` "
            "takes the role and gives it back)"
        )
    if epoch > 0 and m.option(OPT_COMPACTOR_RELEASED) != str(epoch):
        return (
            f" (no embedded compactor; standalone compactor epoch {epoch} holds the role: check that "
            "it still runs and keeps up)"
        )
    return (
        " (no embedded compactor, and no standalone one holds the role: start "
        f"`shaledb --path {url} run-compactor`, or open the writer with the embedded one, "
        "Settings(compactor=CompactorOptions()), the default)"
    )


def warn_even_unconfigured(logger: logging.Logger, msg: str, *args: object) -> None:
    """Log a WARNING; if logging was never configured, print it on stderr all the same.

    The package's ``NullHandler`` (``shaledb/__init__.py``) keeps a library quiet in an
    application that set up no logging -- it also keeps Python's last-resort handler from
    printing WARNINGs, so a writer whose writes stalled for want of a compactor said nothing
    at all and looked hung. For the few warnings a user must act on, this does what Python
    does without that ``NullHandler``: ``logging.lastResort`` (WARNING and above on stderr)
    when no real handler would see the record. A configured application (any handler on the
    way up), a level set above WARNING, or ``logging.lastResort = None`` keeps it quiet."""
    logger.warning(msg, *args)
    if not logger.isEnabledFor(logging.WARNING) or _has_handler(logger):
        return
    last = logging.lastResort
    if last is not None:
        record = logger.makeRecord(logger.name, logging.WARNING, "(shaledb)", 0, msg, args, None)
        record.msg = f"shaledb: {record.getMessage()}"
        record.args = ()
        last.handle(record)


def _has_handler(logger: logging.Logger) -> bool:
    """Whether a record of ``logger`` reaches a handler other than a ``NullHandler``."""
    at: logging.Logger | None = logger
    while at is not None:
        if any(not isinstance(h, logging.NullHandler) for h in at.handlers):
            return True
        if not at.propagate:
            return False
        at = at.parent
    return False


def flush_options(
    m: Manifest, db: FlushHost, wrote_data: bool, flushed_seq: int = 0
) -> tuple[tuple[str, str], ...]:
    """The database options after an L0 flush (see module docstring)."""
    opts = dict(m.options)
    now_ms = int(db.clock.now() * 1000)
    flush_history_options(opts, db.history, flushed_seq, now_ms, db.seq)
    journaled = db.settings.value_separation_threshold is not None
    want = db.settings.journal.recovery_strategy
    if want is not None and opts.get(OPT_RECOVERY) != want:
        opts[OPT_RECOVERY] = want
    elif journaled and OPT_RECOVERY not in opts:
        opts[OPT_RECOVERY] = "retain"
    if journaled and OPT_COMPLETE not in opts:
        fresh = m.last_l0_seq == 0 and not m.data.l0 and not m.data.runs
        opts[OPT_COMPLETE] = "1" if fresh else "0"
    elif not journaled and wrote_data and opts.get(OPT_COMPLETE) == "1":
        opts[OPT_COMPLETE] = "0"
    if db.indexed:
        opts[OPT_INDEXED] = "1"
    out = tuple(sorted(opts.items()))
    return m.options if out == m.options else out
