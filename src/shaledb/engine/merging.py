"""Merge entries in the engine: stacking in memtables, completing, folding.

``Db.merge(key, operand)`` writes a merge entry (kind 3, ``format/merge.py``)
instead of reading the old value and writing a new one. The operands are
folded onto the key's value (by the merge operator, ``shaledb.merge``) only
when someone needs the result:

* **memtable** -- a merge *stacks* on the key's memtable entry: the new entry
  holds every operand the memtable has for the key, over the base entry the
  memtable had (a put, a delete), so the memtable keeps one entry per key and
  needs no operator. A stack without a base continues in older sources. A
  writer folds a stack of :data:`MAX_STACK` operands into a plain value (one
  lookup below), so a hot counter's reads and memory stay bounded.
* **reads** -- a lookup that meets a merge entry without a base walks older
  versions and sources, collecting operands, until it meets a base (or runs
  out: no base, ``existing`` is None) and returns one self-contained merge
  entry (:func:`complete`); :class:`Folder` applies the operator to it.
* **flush** -- a memtable's stacks are cumulative; an L0 SST that keeps
  several versions of a key (a history window) stores each stack's own
  operands only (:func:`uncumulate`), so walking older versions never counts
  an operand twice.
* **compaction** -- every merge version gets the operands and base of the
  versions below it in the compaction's input (:func:`complete_columns`), so
  dropping those versions loses nothing; a self-contained merge, or any merge
  at the bottom of the tree, is folded into a plain value when the compactor
  has the operator (:func:`fold_columns`).

The fold of an expiring base counts it as absent once expired *at the fold*;
the result is a plain value (no metadata, no expiry). Documented in
docs/format/block.md and docs/transactions.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from ..errors import CorruptionError, MergeOperatorFailed, MergeOperatorMismatch, MergeOperatorMissing
from ..format.merge import append_operands, decode_merge, encode_merge, one_operand, operand_count
from ..format.range_dels import Fragments
from ..format.row import KIND_MERGE, KIND_POINTER, KIND_TOMBSTONE, KIND_VALUE, TYPE_MASK, decode_extras
from ..merge import BUILTIN, MergeOperator
from .memtable import Entry, Memtable

MAX_STACK = 64
"""A writer folds a memtable stack of this many operands into a plain value."""

OPT_MERGE_OPERATOR = "merge.operator"
"""Manifest option: the name of the merge operator the database's merges need."""

Columns = tuple[list[bytes], list[int], bytes, list[bytes]]
Base = tuple[int, bytes] | None


def is_merge(kind: int) -> bool:
    return kind == KIND_MERGE


# ------------------------------------------------------------------ operators


class Folder:
    """Applies a handle's merge operator, with the errors users see.

    ``recorded`` is the operator name the database's manifest carries (None:
    none recorded yet); a ready operator of that name is used when the handle
    was given none (readers, Spark tasks, standalone compactors).
    """

    __slots__ = ("op", "recorded")

    def __init__(self, op: MergeOperator | None, recorded: str | None) -> None:
        check_operator(op, recorded)
        if op is None and recorded is not None:
            op = BUILTIN.get(recorded)
        self.op = op
        self.recorded = recorded

    def fold(self, key: bytes, existing: bytes | None, operands: list[bytes]) -> bytes:
        op = self.op
        if op is None:
            used = f" (it records {self.recorded!r})" if self.recorded else ""
            raise MergeOperatorMissing(
                f"key {key[:64]!r} holds merge operands not yet folded, and this handle has no "
                f"merge operator: open it with merge_operator=... as the database was written{used}"
            )
        try:
            out = op.fn(key, existing, operands)
        except Exception as exc:
            raise MergeOperatorFailed(
                f"merge operator {op.name!r} failed on key {key[:64]!r}: {type(exc).__name__}: {exc}"
            ) from exc
        if type(out) is not bytes:
            if isinstance(out, (bytearray, memoryview)):
                return bytes(out)
            raise MergeOperatorFailed(
                f"merge operator {op.name!r} returned {type(out).__name__} for key {key[:64]!r}, not bytes"
            )
        return out


def check_operator(op: MergeOperator | None, recorded: str | None) -> None:
    """Refuse an operator whose name differs from the one the database records."""
    if op is not None and recorded is not None and op.name != recorded:
        raise MergeOperatorMismatch(
            f"the database's merges were written for merge operator {recorded!r}, this handle was "
            f"given {op.name!r}: open it with the same operator (or a MergeOperator of that name)"
        )


BaseValue = Callable[[bytes, int, bytes], "bytes | None"]
"""``(key, kind, payload) -> value or None``: a base entry as a read sees it."""


def fold_payload(folder: Folder, key: bytes, payload: bytes, base_value: BaseValue) -> bytes:
    """The value of a self-contained (or bottom-most) merge entry."""
    base, ops = decode_merge(payload)
    existing = None if base is None else base_value(key, base[0], base[1])
    return folder.fold(key, existing, ops)


# ------------------------------------------------------------------ memtable


def stack(existing: Entry | None, seq: int, operands: list[bytes]) -> Entry:
    """The memtable entry after merging ``operands`` onto ``existing`` (module docstring)."""
    if existing is None:
        return (seq, KIND_MERGE, one_operand(operands[0]) if len(operands) == 1 else encode_merge(operands))
    kind, payload = existing[1], existing[2]
    if kind == KIND_MERGE:
        return (seq, KIND_MERGE, append_operands(payload, operands))
    return (seq, KIND_MERGE, encode_merge(operands, (kind, payload)))


def put_entry(mem: Memtable, key: bytes, e: Entry) -> None:
    """``mem.put`` that stacks a merge entry (a WAL entry: operands, no base)."""
    if e[1] != KIND_MERGE:
        mem.put(key, e)
        return
    base, ops = decode_merge(e[2])
    if base is not None:  # never in a WAL object, but harmless: the entry is self-contained
        mem.put(key, e)
        return
    mem.put(key, stack(stack_base(mem, key), e[0], ops))


def stack_base(mem: Memtable, key: bytes) -> Entry | None:
    """What a new merge of ``key`` stacks onto in ``mem``: its newest entry, or a
    tombstone when a range tombstone of ``mem`` newer than that entry covers ``key``
    (the merge then folds onto ``existing`` None, never onto the deleted value)."""
    existing = mem.d.get(key)
    if mem.rdels:
        top = mem.range_frags().covering(key, None)
        if top and (existing is None or existing[0] < top):
            return (top, KIND_TOMBSTONE, b"")
    return existing


def put_entries(mem: Memtable, keys: Sequence[bytes], ents: Sequence[Entry]) -> None:
    """A batch holding merges: entry by entry, in order (a key may repeat)."""
    for k, e in zip(keys, ents):
        put_entry(mem, k, e)


def stack_size(e: Entry) -> int:
    return operand_count(e[2]) if e[1] == KIND_MERGE else 0


# ------------------------------------------------------------------ reads


class _Reader(Protocol):
    bloom: Any

    def find(self, key: bytes, seq: int | None = None) -> tuple[int, int, bytes] | None: ...


class _Tables(Protocol):
    def reader(self, info: Any) -> Any: ...


class _Run(Protocol):
    def find(self, key: bytes) -> Any: ...


def complete(
    mems: Sequence[Memtable],
    l0: Sequence[Any],
    runs: Sequence[_Run],
    tables: _Tables,
    key: bytes,
    seq: int | None,
    first: Entry,
    floor: int = 0,
) -> Entry:
    """``first`` (the newest visible entry of ``key``, a merge) made self-contained:
    the operands of every merge version below it down to the first base, over that
    base (no base if none). Sources newest first, as ``reads.lookup`` searches them.

    ``floor``: the seq of the newest range tombstone covering ``key`` at ``seq``
    (0: none). Versions older than it are deleted, so the walk stops there with a
    tombstone base: a merge onto a range-deleted key folds onto ``existing`` None."""
    base, ops = decode_merge(first[2])
    if base is not None:
        return first
    groups = [ops]
    cap = first[0] if seq is None else min(seq, first[0])
    found: Base = None

    def take(e: tuple[int, int, bytes]) -> bool:
        """Add ``e``'s operands; True when the walk ends (a base was found)."""
        nonlocal found
        if e[0] < floor:  # below a range tombstone: deleted
            found = (KIND_TOMBSTONE, b"")
            return True
        if e[1] != KIND_MERGE:
            found = (e[1], e[2])
            return True
        b, more = decode_merge(e[2])
        groups.append(more)
        if b is not None:
            found = b
            return True
        return False

    # The memtable that held ``first`` gave its whole stack: continue below it.
    started = False
    done = False
    for m in mems:
        e = m.get(key, cap)
        if e is None:
            continue
        if not started:
            started = True
            if e[0] == first[0] and e[2] == first[2]:
                continue
        if take(e):
            done = True
            break
        cap = e[0] - 1
    if not done:
        infos = [i for i in l0 if i.first_key <= key <= i.last_key]
        infos += [i for i in (r.find(key) for r in runs) if i is not None]
        for info in infos:
            r = tables.reader(info)
            bloom = r.bloom
            if bloom is not None and not bloom.may_contain(*bloom.query(key)):
                continue
            e2 = r.find(key, cap)
            while e2 is not None:
                if not started:
                    started = True
                    if e2[0] == first[0] and e2[1] == first[1] and e2[2] == first[2]:
                        cap = e2[0] - 1
                        e2 = r.find(key, cap) if cap >= 0 else None
                        continue
                if take(e2):
                    done = True
                    break
                cap = e2[0] - 1
                e2 = r.find(key, cap) if cap >= 0 else None
            if done:
                break
    all_ops = [op for g in reversed(groups) for op in g]
    return (first[0], KIND_MERGE, encode_merge(all_ops, found))


def chain_floor(
    mems: Sequence[Memtable],
    l0: Sequence[Any],
    runs: Sequence[_Run],
    tables: _Tables,
    key: bytes,
    floor: int = 0,
) -> int:
    """The sequence number of the oldest version ``key``'s newest merge chain still
    needs: the seq of the base a read folds onto (``floor`` when a range tombstone is
    the base), 0 when every older version may be needed (no base at all, or a
    self-contained merge whose base entry's own seq is no longer known).

    The value journal's compaction keeps the entries at or above it (a merge over a
    journal value points into the journal through its base, ``journal/scoring.py``)."""
    for e in _versions(mems, l0, runs, tables, key):
        if e[0] < floor:
            return floor
        if e[1] != KIND_MERGE:
            return int(e[0])
        if decode_merge(e[2])[0] is not None:
            return 0
    return 0


def _versions(
    mems: Sequence[Memtable], l0: Sequence[Any], runs: Sequence[_Run], tables: _Tables, key: bytes
) -> Iterator[tuple[int, int, bytes]]:
    """Every stored version of ``key``, newest first (one per sequence number)."""
    cap: int | None = None
    for m in mems:
        e = m.get(key, cap)
        if e is not None:
            yield e
            cap = e[0] - 1
    infos = [i for i in l0 if i.first_key <= key <= i.last_key]
    infos += [i for i in (r.find(key) for r in runs) if i is not None]
    for info in infos:
        if cap is not None and cap < 0:
            return
        r = tables.reader(info)
        e2 = r.find(key, cap)
        while e2 is not None:
            yield e2
            cap = e2[0] - 1
            e2 = r.find(key, cap) if cap >= 0 else None


# ------------------------------------------------------------------ flush


def uncumulate(keys: list[bytes], kinds: list[int], payloads: list[bytes]) -> None:
    """In place, for an L0 SST with several versions of a key (newest first): a stack
    without a base keeps only the operands its next older version (a stack of the
    same memtable) does not already hold."""
    n = len(keys)
    for i in range(n - 1):
        if kinds[i] != KIND_MERGE or keys[i + 1] != keys[i] or kinds[i + 1] != KIND_MERGE:
            continue
        base, ops = decode_merge(payloads[i])
        if base is not None:
            continue  # self-contained
        older = operand_count(payloads[i + 1])
        if older >= len(ops):
            raise CorruptionError("a memtable merge stack is shorter than the one below it")
        payloads[i] = encode_merge(ops[older:])


# ------------------------------------------------------------------ compaction


def has_merges(cols: Sequence[Columns]) -> bool:
    return any(KIND_MERGE in c[2] for c in cols)


def complete_columns(cols: Sequence[Columns], frags: Fragments | None = None) -> Columns:
    """All versions of ``cols`` (sources oldest first) in key order, newest first,
    every merge version made self-contained from the versions below it.

    ``frags``: the range tombstones of the same sources. A version above a tombstone
    covering its key never builds on the versions below that tombstone: a merge there
    gets a tombstone base (it folds onto ``existing`` None)."""
    rows = [(k, s, t, p) for ks, ss, ts, ps in cols for k, s, t, p in zip(ks, ss, ts, ps)]
    # Newest source first among equal sequence numbers (the sort is stable).
    order = sorted(range(len(rows)), key=lambda i: (rows[i][0], -rows[i][1], -i))
    keys = [rows[i][0] for i in order]
    seqs = [rows[i][1] for i in order]
    kinds = bytearray(rows[i][2] for i in order)
    pays = [rows[i][3] for i in order]
    n = len(keys)
    i = 0
    while i < n:
        j = i
        while j < n and keys[j] == keys[i]:
            j += 1
        if KIND_MERGE in kinds[i:j]:
            base: Base = None
            known = False  # a base below was seen (False: operands over whatever lies beneath)
            ops: list[bytes] = []
            reset_at = 0  # the range tombstone last crossed (versions below it are deleted)
            for x in range(j - 1, i - 1, -1):  # oldest first
                if frags:
                    t = frags.covering(keys[x], seqs[x])
                    if t > reset_at:
                        base, ops, known, reset_at = (KIND_TOMBSTONE, b""), [], True, t
                if kinds[x] != KIND_MERGE:
                    base, ops, known = (kinds[x], pays[x]), [], True
                    continue
                b, more = decode_merge(pays[x])
                if b is not None:
                    base, ops, known = b, list(more), True
                else:
                    ops = ops + more
                pays[x] = encode_merge(ops, base if known else None)
        i = j
    return keys, seqs, bytes(kinds), pays


def fold_columns(
    cols: Columns,
    *,
    bottom: bool,
    folder: Folder | None,
    base_value: BaseValue,
    journal: bool = False,
    failed: list[bytes] | None = None,
) -> Columns:
    """Merge entries folded into plain values where that is safe: self-contained ones,
    and (``bottom``: nothing lies below) all of them; nothing without an operator.

    Bases in the value journal (POINTER) are folded only with ``journal`` (``base_value``
    then follows pointers: bulk reads). Compaction keeps such a merge self-contained
    instead: it reads no journal, and a folded value written into the ledger would
    undo the value separation (a put of the value puts it back in the journal).

    With ``failed`` (compaction), a merge the operator refuses to fold stays the
    self-contained merge entry it is and its key is appended to ``failed``:
    one key's bad operands must not stop the tree's compaction forever (L0
    growing until writes stall); reads of that key raise the operator's error
    as before. Without it the error is raised (a read)."""
    keys, seqs, kinds, pays = cols
    if folder is None or folder.op is None or KIND_MERGE not in kinds:
        return cols
    kb = bytearray(kinds)
    out = list(pays)
    for i, t in enumerate(kinds):
        if t != KIND_MERGE:
            continue
        base, ops = decode_merge(pays[i])
        if base is None and not bottom:
            continue
        if base is not None and base[0] & TYPE_MASK == KIND_POINTER and not journal:
            continue
        existing = None if base is None else base_value(keys[i], base[0], base[1])
        try:
            out[i] = folder.fold(keys[i], existing, ops)
        except MergeOperatorFailed:
            if failed is None:
                raise
            failed.append(keys[i])
            continue
        kb[i] = KIND_VALUE
    return keys, seqs, bytes(kb), out


def plain_base_value(now_ms: int, resolve: Callable[[bytes, bytes], bytes] | None = None) -> BaseValue:
    """A base entry's value: tombstones and expired values are None; ``resolve(key,
    pointer)`` reads a journal value (None: the caller never passes POINTER bases)."""

    def value(key: bytes, kind: int, payload: bytes) -> bytes | None:
        if kind & TYPE_MASK == KIND_TOMBSTONE:
            return None
        body, _meta, expires, _terms = decode_extras(kind, payload)
        if expires is not None and expires <= now_ms:
            return None
        if kind & TYPE_MASK == KIND_POINTER:
            if resolve is None:
                raise CorruptionError(
                    "a merge's base points into the value journal, which this read cannot follow"
                )
            return resolve(key, body)
        return body

    return value


__all__ = [
    "MAX_STACK",
    "OPT_MERGE_OPERATOR",
    "Folder",
    "chain_floor",
    "check_operator",
    "complete",
    "complete_columns",
    "fold_columns",
    "fold_payload",
    "has_merges",
    "plain_base_value",
    "put_entries",
    "put_entry",
    "stack",
    "stack_base",
    "uncumulate",
]
