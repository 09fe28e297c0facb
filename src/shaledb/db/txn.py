"""Optimistic transactions: ``with db.transaction(isolation=...) as txn:``.

A transaction reads one snapshot (the sequence number current when it began)
and buffers its writes; ``commit`` applies them as one write batch (one
sequence number, one WAL object, durable by the rules of ``Db.write``).
Nothing is locked while the transaction runs: conflicts are found at commit,
under the writer's lock, in the same critical section that assigns the
commit's sequence number, so validation and apply are atomic.

* ``"snapshot"`` (snapshot isolation): the commit fails if any key it writes
  was written -- by another transaction or by a plain ``put``/``write`` --
  after its snapshot (first committer wins). Write skew is possible.
* ``"serializable"``: also fails if any key it read, or any key inside a
  range it scanned (so phantoms count), was written after its snapshot. A
  committed serializable transaction is therefore equivalent to running it
  alone at its commit point. A transaction that wrote nothing commits without
  validation: it read one consistent snapshot.

The writer keeps a :class:`ConflictLog` only while a transaction is open: the
keys of every write applied since the oldest open transaction's snapshot.
When the oldest transaction ends, entries no open transaction can conflict
with are dropped; when none is open the log is dropped and plain writes pay
nothing.

Range deletes (``txn.delete_range``) follow the same rules with the range in
place of a key: under both isolations a transaction's range delete conflicts
with any key inside the range written after its snapshot, and another commit's
range delete conflicts with a transaction that writes (or, serializable, read
or scanned) a key inside that range. Inside the transaction a range delete
drops its own earlier writes in the range; later writes stand.

A transaction object is for one thread; run transactions from many threads
by giving each its own. Its buffered writes and read sets have no lock, so a
call from another thread than the one that began it raises ``WrongThread``
(before, two threads sharing one lost writes or raised "dictionary changed
size during iteration" mid-commit). Once its database is closed, every call
but ``rollback`` raises ``ClosedError`` saying so.

``txn.merge(key, operand)`` counts as a write of ``key`` for conflicts (like a
put: first committer wins), not as a read, even though the operand is folded
onto whatever value the key has at commit: merges of two transactions to one
key therefore conflict, which keeps the rule simple and the same for every
operator (one that is not commutative would otherwise depend on commit
order). Reads inside the transaction see its own merges folded onto the
snapshot's value (with the database's merge operator).
"""

from __future__ import annotations

import threading
import weakref
from bisect import bisect_left
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from itertools import islice
from typing import TYPE_CHECKING, Literal, NoReturn, SupportsIndex, TypeVar, overload

from ..engine.reads import check_limit
from ..errors import ClosedError, InvalidArgument, MergeOperatorMissing, TransactionConflict, WrongThread
from ..keys import BytesLike, check_key, check_value, scan_bounds
from ..numbers import check_flag
from .batch import WriteBatch, check_range
from .mapping import refuse_pickle

if TYPE_CHECKING:
    from .writer import Db, Snapshot, WriteHandle

Isolation = Literal["snapshot", "serializable"]
ISOLATIONS: tuple[str, ...] = ("snapshot", "serializable")

_Range = tuple[bytes | None, bytes | None]
D = TypeVar("D")


class ConflictLog:
    """Keys written since the oldest open transaction began, guarded by the writer's lock.

    ``last`` maps a key to the newest sequence number that wrote it (point
    checks in O(1)); ``entries`` keeps each write's sorted keys in sequence
    order for range checks and for pruning.
    """

    def __init__(self) -> None:
        self.open: Counter[int] = Counter()
        self.last: dict[bytes, int] = {}
        self.entries: deque[tuple[int, tuple[bytes, ...]]] = deque()
        self.ranged: deque[tuple[int, tuple[tuple[bytes, bytes], ...]]] = deque()
        """Range deletes ``(seq, ((start, end), ...))`` since the oldest open transaction."""
        self.local = threading.local()

    # called by the writer, under its lock ---------------------------------

    def admit(self, seq: int, keys: Iterable[bytes], ranges: Iterable[tuple[bytes, bytes]] = ()) -> None:
        """A write is about to take ``seq``: validate this thread's committing
        transaction (raises :class:`TransactionConflict`, nothing applied), then record it."""
        txn: Transaction | None = getattr(self.local, "txn", None)
        if txn is not None:
            self.validate(txn)
        ks = tuple(sorted(set(keys)))
        last = self.last
        for k in ks:
            last[k] = seq
        self.entries.append((seq, ks))
        rs = tuple(ranges)
        if rs:
            self.ranged.append((seq, rs))

    def _range_deleted(self, key: bytes, snap: int) -> bool:
        for seq, rs in reversed(self.ranged):
            if seq <= snap:
                return False
            if any(s <= key < e for s, e in rs):
                return True
        return False

    def _validate_ranges(self, txn: Transaction, snap: int) -> None:
        """Conflicts that involve range deletes (this transaction's or other commits')."""
        ranged = self.ranged
        if ranged and ranged[-1][0] > snap:
            # _own(), not _writes: a merge is a write for conflicts (module docstring); with
            # _writes a key the transaction only merged into was never checked against range
            # deletes, and the commit brought the key back after another commit deleted it.
            own = list(txn._own())
            keys = [*own, *txn._reads] if txn.isolation == "serializable" else own
            for k in keys:
                if self._range_deleted(k, snap):
                    raise TransactionConflict(k, f"key {k!r} was deleted by another commit's range delete")
            if txn.isolation == "serializable":
                for seq, rs in reversed(ranged):
                    if seq <= snap:
                        break
                    for s, e in txn._ranges:
                        for a, b in rs:
                            if (s is None or s < b) and (e is None or a < e):
                                raise TransactionConflict(
                                    a, "a range scanned by this transaction was range-deleted"
                                )
        if not txn._rdels:
            return
        for seq, ks in reversed(self.entries):
            if seq <= snap:
                break
            for s, e in txn._rdels:
                i = bisect_left(ks, s)
                if i < len(ks) and ks[i] < e:
                    raise TransactionConflict(
                        ks[i], f"key {ks[i]!r} in a range this transaction deletes was written since it began"
                    )
        for seq, rs in reversed(ranged):
            if seq <= snap:
                break
            for s, e in txn._rdels:
                for a, b in rs:
                    if s < b and a < e:
                        raise TransactionConflict(
                            s, "a range this transaction deletes was range-deleted since it began"
                        )

    def validate(self, txn: Transaction) -> None:
        snap = txn.snapshot_seq
        if self.ranged or txn._rdels:
            self._validate_ranges(txn, snap)
        last = self.last
        for k in txn._own():  # merges are writes for conflicts (module docstring)
            if last.get(k, 0) > snap:
                raise TransactionConflict(
                    k, f"key {k!r} was written by another commit after this transaction began"
                )
        if txn.isolation != "serializable":
            return
        for k in txn._reads:
            if last.get(k, 0) > snap:
                raise TransactionConflict(k, f"key {k!r} read by this transaction was written since it began")
        if not txn._ranges:
            return
        for seq, ks in reversed(self.entries):
            if seq <= snap:
                break
            for s, e in txn._ranges:
                i = 0 if s is None else bisect_left(ks, s)
                if i < len(ks) and (e is None or ks[i] < e):
                    raise TransactionConflict(
                        ks[i],
                        f"key {ks[i]!r} in a range scanned by this transaction was written since it began",
                    )

    def register(self, seq: int) -> None:
        self.open[seq] += 1

    def unregister(self, seq: int) -> bool:
        """One transaction that registered at ``seq`` ended; True if none is open now."""
        self.open[seq] -= 1
        if self.open[seq] <= 0:
            del self.open[seq]
        if not self.open:
            self.last.clear()
            self.entries.clear()
            self.ranged.clear()
            return True
        oldest = min(self.open)
        while self.ranged and self.ranged[0][0] <= oldest:
            self.ranged.popleft()
        entries, last = self.entries, self.last
        while entries and entries[0][0] <= oldest:
            seq0, ks = entries.popleft()
            for k in ks:
                if last.get(k) == seq0:
                    del last[k]
        return False

    def size(self) -> int:
        """Recorded write entries (for tests of the memory bound)."""
        return len(self.entries)


def begin(db: Db, isolation: str, durable: bool) -> Transaction:
    """Start a transaction on ``db`` (see :meth:`shaledb.Db.transaction`)."""
    if isolation not in ISOLATIONS:
        raise InvalidArgument(f"isolation must be one of {ISOLATIONS}, got {isolation!r}")
    check_flag("durable", durable)
    with db._lock:
        db._check_failure()
        log = db._txn_log
        if log is None:
            log = db._txn_log = ConflictLog()
        floor = db._seq
        log.register(floor)
    try:
        snap = db.snapshot()
    except BaseException:
        _unregister(db, floor)
        raise
    return Transaction(db, snap, floor, isolation, durable)  # type: ignore[arg-type]


def _unregister(db: Db, floor: int) -> None:
    with db._lock:
        log = db._txn_log
        if log is not None and log.unregister(floor):
            db._txn_log = None


class Transaction:
    """Reads at a snapshot, buffered writes, validated and applied at commit.

    Use as a context manager (commit on clean exit, rollback on an exception)
    or call :meth:`commit` / :meth:`rollback`. After either, the transaction
    is finished and its methods raise ``ClosedError``.
    """

    def __init__(self, db: Db, snap: Snapshot, floor: int, isolation: Isolation, durable: bool) -> None:
        self._db = db
        self._snap: Snapshot | None = snap
        self._floor = floor
        self.isolation: Isolation = isolation
        self.durable = durable
        self.snapshot_seq = snap.seq
        """The sequence number this transaction reads at."""
        self.commit_seq: int | None = None
        """The commit's sequence number (None until committed; the snapshot's for a read-only one)."""
        self._writes: dict[bytes, bytes | None] = {}
        self._merges: dict[bytes, list[bytes]] = {}
        """Operands merged into a key after its entry in ``_writes`` (or the snapshot's value)."""
        self._reads: set[bytes] = set()
        self._ranges: list[_Range] = []
        self._rdels: list[tuple[bytes, bytes]] = []
        """This transaction's range deletes, in order (applied before its writes at commit)."""
        # A transaction dropped unfinished still leaves the conflict log (like a snapshot's pin).
        self._unregister = weakref.finalize(self, _unregister, db, floor)
        # A thread-local only the beginning thread has set: unlike threading.get_ident(), which
        # a new thread reuses once the old one ended, a new thread never sees another's value.
        self._owner = threading.local()
        self._owner.mine = True
        self._thread_name = threading.current_thread().name

    # ------------------------------------------------------------------ reads

    def _live(self) -> Snapshot:
        snap = self._snap
        if snap is None:
            raise ClosedError("the transaction has finished (committed or rolled back)")
        self._check_thread()
        if self._db.closed:
            raise ClosedError("database is closed: this transaction ended with it, uncommitted")
        return snap

    def _check_thread(self) -> None:
        if not getattr(self._owner, "mine", False):
            raise WrongThread(
                f"this transaction belongs to the thread that began it ({self._thread_name!r}), "
                f"not {threading.current_thread().name!r}: give each thread its own db.transaction()"
            )

    @overload
    def get(self, key: BytesLike) -> bytes | None: ...
    @overload
    def get(self, key: BytesLike, default: D) -> bytes | D: ...
    def get(self, key: BytesLike, default: D | None = None) -> bytes | D | None:
        """The value of ``key``: this transaction's own write, else the snapshot's; ``default``
        (None) when it is absent, as the handles' ``get``."""
        value = self._get(key)
        return default if value is None else value

    def _get(self, key: BytesLike) -> bytes | None:
        k = check_key(key)
        snap = self._live()
        if k in self._merges:
            return self._merged(k)
        if k in self._writes:
            return self._writes[k]
        if self.isolation == "serializable":
            self._reads.add(k)
        if self._rdels and self._in_rdels(k):
            return None
        value: bytes | None = snap.get(k)
        return value

    def _in_rdels(self, k: bytes) -> bool:
        return any(s <= k < e for s, e in self._rdels)

    def get_many(self, keys: Iterable[BytesLike]) -> list[bytes | None]:
        """The values of ``keys`` in order (None where absent), as :meth:`get` would give."""
        ks = [check_key(k) for k in keys]
        snap = self._live()
        if self._merges and any(k in self._merges for k in ks):
            return [self._get(k) for k in ks]
        missing = [k for k in ks if k not in self._writes]
        if self.isolation == "serializable":
            self._reads.update(missing)
        found = dict(zip(missing, snap.get_many(missing))) if missing else {}
        if self._rdels:
            found = {k: None if self._in_rdels(k) else v for k, v in found.items()}
        return [self._writes[k] if k in self._writes else found[k] for k in ks]

    def scan(
        self,
        start: BytesLike | None = None,
        end: BytesLike | None = None,
        *,
        prefix: BytesLike | None = None,
        reverse: bool = False,
        limit: int | None = None,
    ) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` pairs with ``start <= key < end``: the snapshot with this
        transaction's writes laid over it. Under serializable isolation the
        whole requested range counts as read (a later insert into it conflicts)."""
        s, e = scan_bounds(start, end, prefix)
        check_limit(limit)
        snap = self._live()
        if self.isolation == "serializable":
            self._ranges.append((s, e))
        mine = sorted(
            (k, self._merged(k) if k in self._merges else v)
            for k, v in self._own().items()
            if (s is None or k >= s) and (e is None or k < e)
        )
        if reverse:
            mine.reverse()
        base: Iterable[tuple[bytes, bytes]] = snap.scan(s, e, reverse=bool(reverse))
        if self._rdels:
            base = (kv for kv in base if not self._in_rdels(kv[0]))
        rows = _overlay(base, mine, bool(reverse))
        return rows if limit is None else islice(rows, limit)

    # ----------------------------------------------------------------- writes

    def put(self, key: BytesLike, value: BytesLike) -> None:
        """Set ``key`` to ``value`` when the transaction commits."""
        k, v = check_key(key), check_value(value)
        self._live()
        self._writes[k] = v
        self._merges.pop(k, None)

    def delete(self, key: BytesLike) -> None:
        """Remove ``key`` when the transaction commits."""
        k = check_key(key)
        self._live()
        self._writes[k] = None
        self._merges.pop(k, None)

    def merge(self, key: BytesLike, operand: BytesLike) -> None:
        """Merge ``operand`` into ``key`` when the transaction commits (``Db.merge``; a
        write for conflicts, see the module docstring)."""
        k, v = check_key(key), check_value(operand)
        self._live()
        if self._db.merge_operator is None:
            raise MergeOperatorMissing("merge needs Settings(merge_operator=...) (see shaledb.merge)")
        self._merges.setdefault(k, []).append(v)

    def _own(self) -> dict[bytes, bytes | None]:
        """Every key this transaction wrote (merged-only keys map to None here)."""
        if not self._merges:
            return self._writes
        return {**dict.fromkeys(self._merges), **self._writes}

    def _merged(self, k: bytes) -> bytes:
        """``k``'s value with this transaction's operands folded on (reads its snapshot)."""
        snap = self._live()
        if k in self._writes:
            existing = self._writes[k]
        elif self._rdels and self._in_rdels(k):
            existing = None  # this transaction's range delete came first: no base
        else:
            if self.isolation == "serializable":
                self._reads.add(k)
            existing = snap.get(k)
        return self._db.vis.folder.fold(k, existing, list(self._merges[k]))

    def delete_range(self, start: BytesLike, end: BytesLike) -> None:
        """Remove every key in ``[start, end)`` when the transaction commits (one range
        tombstone); this transaction's earlier writes in the range are dropped."""
        s, e = check_range(start, end)
        self._live()
        if s == e:
            return
        for k in [k for k in self._writes if s <= k < e]:
            del self._writes[k]
        for k in [k for k in self._merges if s <= k < e]:
            del self._merges[k]  # merges before the range delete go with it; later ones fold onto None
        self._rdels.append((s, e))

    # ------------------------------------------------------------ completion

    def commit(self) -> WriteHandle:
        """Validate and apply the writes as one batch; ``TransactionConflict`` (a
        ``ConflictError``) if another commit got there first -- then nothing is written."""
        self._live()
        db = self._db
        batch = WriteBatch()
        for s, e in self._rdels:
            batch.delete_range(s, e)
        for k in sorted(self._own()):
            if k in self._writes:
                v = self._writes[k]
                if v is None:
                    batch.delete(k)
                else:
                    batch.put(k, v)
            for op in self._merges.get(k, ()):
                batch.merge(k, op)
        log = db._txn_log
        assert log is not None  # registered while this transaction is open
        try:
            log.local.txn = self
            try:
                handle = db.write(batch, durable=self.durable)
            except TransactionConflict:
                db.metrics_state.count_txn("conflicts")
                raise
            finally:
                log.local.txn = None
            self.commit_seq = handle.seq
            db.metrics_state.count_txn("commits")
            return handle
        finally:
            self._finish()

    def rollback(self) -> None:
        """Discard the writes (a finished transaction is left as it is)."""
        if self._snap is not None:
            self._check_thread()
            self._db.metrics_state.count_txn("rollbacks")
            self._finish()

    def _finish(self) -> None:
        snap, self._snap = self._snap, None
        if snap is None:
            return
        snap.close()
        self._writes.clear()
        self._merges.clear()
        self._reads.clear()
        self._ranges.clear()
        self._rdels.clear()
        self._unregister()

    @property
    def finished(self) -> bool:
        return self._snap is None

    def __enter__(self) -> Transaction:
        self._live()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None and self._snap is not None:
            self.commit()
        else:
            self.rollback()

    def __reduce_ex__(self, protocol: SupportsIndex) -> NoReturn:
        refuse_pickle(self)  # (else its Db's error, naming a handle the caller did not pickle)

    def __repr__(self) -> str:
        state = "finished" if self._snap is None else "open"
        return f"Transaction({self.isolation}, seq={self.snapshot_seq}, {state})"


def _overlay(
    base: Iterable[tuple[bytes, bytes]], mine: list[tuple[bytes, bytes | None]], reverse: bool
) -> Iterator[tuple[bytes, bytes]]:
    """Merge two key-ordered streams; ``mine`` wins on equal keys, None drops the key."""
    it = iter(base)
    i, n = 0, len(mine)
    for k, v in it:
        while i < n and (mine[i][0] > k if reverse else mine[i][0] < k):
            mk, mv = mine[i]
            i += 1
            if mv is not None:
                yield mk, mv
        if i < n and mine[i][0] == k:
            mk, mv = mine[i]
            i += 1
            if mv is not None:
                yield mk, mv
            continue
        yield k, v
    for mk, mv in mine[i:]:
        if mv is not None:
            yield mk, mv


__all__ = ["ConflictLog", "Isolation", "Transaction", "begin"]
