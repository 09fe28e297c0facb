"""What one ingest part writes besides its rows: table SSTs cut by size, index-tree
entries, value-journal objects (the output side of :class:`~shaledb.bulk.ingest.PartWriter`).

* :class:`SstCutter` turns sorted entries into table SSTs of at most
  ``plan.max_sst_size_bytes``, uploading each as it fills (the data tree and
  the index tree each have one).
* :class:`TermsPlanner` works out each row's index terms and the index-tree
  entries, with the same rules as ``Db.put(..., indexes=)``: the fields a row
  gives replace that key's terms for those fields, the others keep theirs
  (looked up in the version the plan pins when the database already has
  terms), and a term the key loses gets an index tombstone.
* :class:`JournalCutter` holds rows back until the journal object their large
  values go to is written, because a pointer names the object's block
  offsets, which are known only once the object is built.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import accumulate, repeat
from operator import add
from typing import TYPE_CHECKING, Any, cast

from ...engine.indexes import term_changes
from ...engine.sstable import SstSplitter, put_new_journal
from ...errors import InvalidArgument
from ...format.journal import index_key_tail, index_term_prefix
from ...format.row import (
    KIND_POINTER,
    KIND_TOMBSTONE,
    KIND_VALUE,
    TYPE_MASK,
    encode_field_terms,
    encode_terms,
    terms_from_fields,
)
from ...format.sst import ENTRY_OVERHEAD, SST_JOURNAL, SstBuilder
from ...keys import MAX_KEY_BYTES, check_key
from ...manifest.model import JournalFile, SstInfo
from .arrow import bloom_filter_bytes

if TYPE_CHECKING:
    from .parts import PartWriter

Terms = dict[str, tuple[bytes, ...]]
TermColumn = Sequence[Sequence[bytes] | bytes | None]
CheckedColumns = list[tuple[str, list[tuple[bytes, ...]]]]
"""``(field, each row's terms: sorted, distinct, checked)`` per field."""
_ONE_TERM = frozenset({bytes, type(None)})


class SstCutter:
    """Sorted entries in, table SSTs of at most the plan's size out (uploaded as they fill)."""

    def __init__(self, w: PartWriter, *, bloom: bool = True) -> None:
        self.w = w
        self.bloom = bloom
        self.splitter = SstSplitter(w.plan.max_sst_size_bytes, w.new_builder, self._emit)
        self.bloom_keys: list[bytes] = []
        self.bloom_hashes: list[tuple[Any, Any]] = []
        """Keys of the SST being built already hashed for its filter (the Arrow path)."""
        self.ssts: list[SstInfo] = []

    def add(self, ks: list[bytes], kinds: bytes | Sequence[int], pays: Sequence[bytes]) -> None:
        n = len(ks)
        if not n:
            return
        seqs = [self.w.plan.seq] * n
        cum = list(accumulate(map(add, map(add, map(len, ks), map(len, pays)), repeat(ENTRY_OVERHEAD, n))))

        def fill(b: SstBuilder, lo: int, hi: int) -> None:
            b.add_many(ks[lo:hi], seqs[lo:hi], kinds[lo:hi], pays[lo:hi])
            self.bloom_keys += ks[lo:hi]

        self.splitter.place(cum, n, fill)

    def finish_sst(self) -> None:
        self.splitter.finish()

    def _emit(self, b: SstBuilder) -> None:
        bits = self.w.plan.bloom_bits_per_key
        filt = bloom_filter_bytes(self.bloom_keys, bits, self.bloom_hashes) if bits and self.bloom else None
        data, props = b.finish_buffer(filter_block=filt)
        self.bloom_keys, self.bloom_hashes = [], []
        self.ssts.append(self.w.upload_sst(data, props))


class TermsPlanner:
    """Each row's terms (the TERMS extra) and the part's index-tree entries."""

    def __init__(self, fields: Sequence[str], old_terms: Callable[[bytes], Terms] | None) -> None:
        self.fields = tuple(fields)
        self.old_terms = old_terms
        self.index_keys: list[bytes] = []
        self.index_kinds = bytearray()
        self._field_bytes: dict[tuple[str, tuple[bytes, ...]], bytes] = {}
        self._prefixes: dict[tuple[str, bytes], bytes] = {}

    @property
    def active(self) -> bool:
        return bool(self.fields) or self.old_terms is not None

    def rows(self, ks: Sequence[bytes], given: Mapping[str, TermColumn] | None) -> list[bytes | None]:
        """Each row's TERMS extra (``encode_terms`` bytes; None: none), noting index entries."""
        n = len(ks)
        cols = _term_columns(self.fields, given, n)
        if self.old_terms is None:
            return self._fresh_rows(ks, cols)
        out: list[bytes | None] = []
        ik, kinds = self.index_keys, self.index_kinds
        lookup = self.old_terms
        for i, k in enumerate(ks):
            old = lookup(k)
            new = dict(old)
            for f, col in cols:
                ts = col[i]
                if ts:
                    new[f] = ts
                else:
                    new.pop(f, None)
            for ikey, live in term_changes(k, old, new):
                ik.append(ikey)
                kinds.append(KIND_VALUE if live else KIND_TOMBSTONE)
            out.append(encode_terms(new) if new else None)
        return out

    def _fresh_rows(self, ks: Sequence[bytes], cols: CheckedColumns) -> list[bytes | None]:
        """:meth:`rows` when no key has terms yet: each row's terms are the ones it brings.

        Rows share few distinct terms (a destination, a tail number), so each
        field's encoded terms and each term's index-key prefix are made once
        per part and joined per row: the bytes ``encode_terms`` and
        ``index_key`` give, at a third of their cost.
        """
        fields, prefixes = self._field_bytes, self._prefixes
        ik = self.index_keys
        start = len(ik)
        by_name = sorted(cols, key=lambda c: c[0])  # encode_terms sorts fields by name
        out: list[bytes | None] = []
        for i, k in enumerate(ks):
            enc: list[bytes] = []
            tail = b""
            for f, col in by_name:
                ts = col[i]
                if not ts:
                    continue
                piece = fields.get((f, ts))
                if piece is None:
                    piece = fields[(f, ts)] = encode_field_terms(f, ts)
                enc.append(piece)
                tail = tail or index_key_tail(k)
                for t in ts:
                    pre = prefixes.get((f, t))
                    if pre is None:
                        pre = prefixes[(f, t)] = index_term_prefix(f, t)
                    ik.append(pre + tail)
            out.append(terms_from_fields(enc) if enc else None)
        self.index_kinds += bytes([KIND_VALUE]) * (len(ik) - start)
        return out

    def write(self, cutter: SstCutter) -> None:
        """Write the index entries gathered, sorted, through ``cutter``."""
        ik, kinds = self.index_keys, self.index_kinds
        order = sorted(range(len(ik)), key=ik.__getitem__)
        cutter.add([ik[i] for i in order], bytes(kinds[i] for i in order), [b""] * len(order))
        self.index_keys, self.index_kinds = [], bytearray()


def _term_columns(fields: Sequence[str], given: Mapping[str, TermColumn] | None, n: int) -> CheckedColumns:
    """The given term columns, each row's terms checked, deduplicated and sorted."""
    if not given:
        if fields:
            raise InvalidArgument(f"this ingest brings index terms for {list(fields)}: pass indexes=")
        return []
    if set(given) != set(fields):
        raise InvalidArgument(
            f"indexes= has fields {sorted(given)}, but the ingest began with index_fields {list(fields)}"
        )
    out: CheckedColumns = []
    for f in fields:
        col = given[f]
        if len(col) != n:
            raise InvalidArgument(f"index column {f!r} has {len(col)} rows, the keys {n}")
        terms: list[tuple[bytes, ...]]
        if set(map(type, col)) <= _ONE_TERM:  # one term or none per row: C-level checks
            ones = cast("Sequence[bytes | None]", col)
            present = [t for t in ones if t is not None]
            if present and not 0 < min(map(len, present)) <= max(map(len, present)) <= MAX_KEY_BYTES:
                for t in present:
                    check_key(t)  # raises, naming the bad term
            terms = [() if t is None else (t,) for t in ones]
            out.append((f, terms))
            continue
        terms = []
        for x in col:
            if x is None:
                terms.append(())
            elif type(x) is bytes:
                terms.append((check_key(x),))
            elif isinstance(x, (str, bytearray, memoryview)):
                raise InvalidArgument(
                    f"index terms of {f!r} must be bytes (or lists of bytes), got {x!r:.60}"
                )
            else:
                terms.append(tuple(sorted({check_key(t) for t in x})))
        out.append((f, terms))
    return out


class JournalCutter:
    """Rows whose large values go to value-journal objects; the rest wait for the pointers.

    Rows arrive in key order; values of at least ``threshold`` bytes are
    added to the current journal object, and every row (large or not) waits
    until that object is uploaded, then goes to ``out`` in order, its large
    values replaced by POINTER entries (extras kept, as the L0 flush does).
    """

    def __init__(self, w: PartWriter, threshold: int, out: SstCutter) -> None:
        self.w = w
        self.threshold = threshold
        self.out = out
        self.builder: SstBuilder | None = None
        self.ks: list[bytes] = []
        self.kinds: list[int] = []
        self.pays: list[bytes] = []
        self.moves: list[tuple[int, int, int]] = []
        """(row position, entry number in the journal object, value length)."""
        self.files: list[JournalFile] = []

    def add(self, ks: list[bytes], kinds: Iterable[int], pays: list[bytes], vlens: list[int]) -> None:
        """Rows in key order; a journal object is cut before the value that would overflow it."""
        kl = list(kinds)
        thr, limit = self.threshold, self.w.plan.max_sst_size_bytes
        size = 0 if self.builder is None else self.builder.estimated_size
        lo = 0
        for i, n in enumerate(vlens):
            if n >= thr:
                grow = len(ks[i]) + len(pays[i]) + ENTRY_OVERHEAD
                if size and size + grow > limit:
                    self._segment(ks[lo:i], kl[lo:i], pays[lo:i], vlens[lo:i])
                    self.flush()
                    lo, size = i, 0
                size += grow
        self._segment(ks[lo:], kl[lo:], pays[lo:], vlens[lo:])
        if self.builder is not None and self.builder.estimated_size >= limit:
            self.flush()

    def _segment(self, ks: list[bytes], kinds: list[int], pays: list[bytes], vlens: list[int]) -> None:
        base = len(self.ks)
        self.ks += ks
        self.kinds += kinds
        self.pays += pays
        big = [i for i, n in enumerate(vlens) if n >= self.threshold]
        if not big:
            if self.builder is None:
                self._release()
            return
        if self.builder is None:
            self.builder = SstBuilder(
                kind=SST_JOURNAL,
                block_size=self.w.plan.block_size_bytes,
                codec=self.w.codec,
                bloom_bits_per_key=0,
                created_at_ms=int(self.w.clock.now() * 1000),
                nonce=self.w.rng.getrandbits(128).to_bytes(16, "little"),
            )
        b = self.builder
        first = b.entries
        b.add_many(
            [ks[i] for i in big],
            [self.w.plan.seq] * len(big),
            [kinds[i] for i in big],
            [pays[i] for i in big],
        )
        self.moves += [(base + i, first + j, vlens[i]) for j, i in enumerate(big)]

    def flush(self) -> None:
        """Upload the current journal object, point its rows at it and release every held row."""
        b = self.builder
        self.builder = None
        if b is not None and b.entries:
            w = self.w
            record, ptrs = put_new_journal(
                w.store,
                b,
                w.new_id,
                [(g, vlen) for _, g, vlen in self.moves],
            )
            w.renew_lease()
            self.files.append(record)
            for (pos, _, vlen), ptr in zip(self.moves, ptrs):
                p = self.pays[pos]
                self.kinds[pos] = (self.kinds[pos] & ~TYPE_MASK) | KIND_POINTER
                self.pays[pos] = p[: len(p) - vlen] + ptr
        self.moves = []
        self._release()

    def _release(self) -> None:
        self.out.add(self.ks, self.kinds, self.pays)
        self.ks, self.kinds, self.pays = [], [], []


__all__ = ["JournalCutter", "SstCutter", "TermsPlanner"]
