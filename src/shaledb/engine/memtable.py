"""The memtable: a dict plus a lazily sorted key list.

Puts are one dict store (the hot path stays C-level). Ordered reads need the
keys sorted; we keep the last sorted list and the keys added since, and merge
them (Timsort merges two sorted runs in linear time) only when a scan needs
order and many keys have arrived. Small numbers of new keys are merged per
scan instead, so alternating writes and short scans stay cheap.

Entries are tuples ``(seq, kind, payload)`` (see ``format/row.py``).

A writer's memtable carries a second one, ``sub``, for the index tree
(secondary-index entries, written in the same batches), frozen and flushed
with it; pins apply to both. ``locs`` maps keys whose value went to a WAL
object (key/value separation) to ``(seq, pointer, value_len)``, filled by the
WAL writer once the object is written, read by the L0 flush.

Snapshots and iterators *pin* a sequence number. While any pin exists, an
overwrite keeps the replaced entry in ``hist`` so a reader at the pinned
sequence still finds it; with no pins there is no history and no extra work.
All mutation happens under the database's write lock; reads are lock-free
(CPython makes each dict operation atomic), except that listing the sorted
keys, which merges the keys added since, takes the memtable's own lock: two
threads listing at once (scans, or the flusher and a snapshot's scan) must
never see a merge half done.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterator
from itertools import filterfalse

from ..format.range_dels import EMPTY, Fragments

Entry = tuple[int, int, bytes]

ENTRY_OVERHEAD = 160
"""Accounted bytes per entry beyond key and payload: dict slot, tuple, the
key and payload objects and WAL-buffer references. Keeps the memtable budget
close to real memory."""

_MERGE_AT = 4096


class Memtable:
    __slots__ = (
        "_frags",
        "_merging",
        "_new",
        "_sorted",
        "d",
        "first_seq",
        "hist",
        "last_seq",
        "locs",
        "nbytes",
        "pins",
        "rdels",
        "sub",
        "wal_id",
    )

    def __init__(self) -> None:
        self.d: dict[bytes, Entry] = {}
        self.hist: dict[bytes, list[Entry]] | None = None
        self.pins: dict[int, int] = {}
        self.nbytes = 0
        self.first_seq = 0
        self.last_seq = 0
        self.wal_id = 0
        """After freezing: the last WAL id holding this memtable's writes."""
        self.sub: Memtable | None = None
        """The index-tree memtable of the same generation (writers and readers)."""
        self.locs: dict[bytes, tuple[int, bytes, int]] = {}
        """key -> (seq, journal pointer, value length) of separated values."""
        self.rdels: list[tuple[bytes, bytes, int]] = []
        """Range tombstones ``(start, end, seq)`` in arrival order (``delete_range``)."""
        self._frags: tuple[int, Fragments] = (0, EMPTY)
        self._sorted: list[bytes] = []
        self._new: list[bytes] = []
        self._merging = threading.Lock()
        """Held by whoever reads or merges the key lists (scans, snapshots, the flusher), which
        run outside the database's write lock; writers only append to ``_new``."""

    def __len__(self) -> int:
        return len(self.d)

    # ----------------------------------------------------------------- writes

    def put(self, key: bytes, entry: Entry) -> None:
        d = self.d
        old = d.get(key)
        if old is not None and self.pins:
            self._keep(key, old)
        # The entry first, then the key list (appended by the only call left): a
        # KeyboardInterrupt raised at that call finds both done, never a key listed
        # without an entry.
        d[key] = entry
        if old is None:
            self._new.append(key)

    def put_many(self, keys: list[bytes], entries: list[Entry]) -> None:
        d = self.d
        if self.pins:
            for k, e in zip(keys, entries):
                self.put(k, e)
            return
        n0 = len(d)
        # The keys this batch adds, found before the update with C-level membership
        # tests (searching ``_new`` afterwards cost O(memtable)): all of them when the
        # batch shares no key with the memtable (``isdisjoint`` stops at the first shared).
        fresh = keys if not n0 or d.keys().isdisjoint(keys) else list(filterfalse(d.__contains__, keys))
        new = self._new
        pairs = zip(keys, entries)
        listed = False
        try:
            d.update(pairs)
            added = len(d) - n0
            # (a key repeats within the batch when fewer were added than found new)
            add = fresh if added == len(fresh) else list(dict.fromkeys(fresh))
            new += add  # (no call between this and ``listed``: an interrupt lands before or after both)
            listed = True
        except BaseException:
            # A KeyboardInterrupt (Ctrl-C) after the update: list its keys all the same. A key
            # in ``d`` and in neither list is missed by scans and the L0 flush, and so are its
            # later writes (a key already in ``d`` is not listed again).
            if not listed:
                new += dict.fromkeys(fresh)
            raise

    def add_range_del(self, start: bytes, end: bytes, seq: int) -> None:
        """A range tombstone: hides older versions of keys in ``[start, end)``."""
        self.rdels.append((start, end, seq))

    def range_frags(self) -> Fragments:
        """The range tombstones, fragmented (rebuilt only after new ones arrived;
        lock-free: a reader builds from the first ``n`` and labels the result ``n``)."""
        n = len(self.rdels)
        cached = self._frags
        if cached[0] == n:
            return cached[1]
        frags = Fragments.build(self.rdels[:n])
        self._frags = (n, frags)
        return frags

    def _keep(self, key: bytes, old: Entry) -> None:
        if old[0] > max(self.pins):
            return  # every pinned reader is older than the replaced entry
        if self.hist is None:
            self.hist = {}
        self.hist.setdefault(key, []).append(old)

    def pin(self, seq: int) -> None:
        self.pins[seq] = self.pins.get(seq, 0) + 1
        if self.sub is not None:
            self.sub.pin(seq)

    def unpin(self, seq: int) -> None:
        if self.sub is not None:
            self.sub.unpin(seq)
        n = self.pins.get(seq, 0) - 1
        if n > 0:
            self.pins[seq] = n
        else:
            self.pins.pop(seq, None)
            if not self.pins:
                self.hist = None

    # ------------------------------------------------------------------ reads

    def get(self, key: bytes, seq: int | None = None) -> Entry | None:
        """The newest entry for ``key`` visible at ``seq`` (None: not here)."""
        e = self.d.get(key)
        if e is None or seq is None or e[0] <= seq:
            return e
        return self._older(key, seq)

    def _older(self, key: bytes, seq: int) -> Entry | None:
        hist = self.hist
        if not hist:
            return None
        versions = hist.get(key)
        if not versions:
            return None
        for e in reversed(versions):
            if e[0] <= seq:
                return e
        return None

    def sorted_keys(self) -> list[bytes]:
        """All keys, sorted (merges the keys added since the last call)."""
        with self._merging:
            return self._merge_locked()

    def _merge_locked(self) -> list[bytes]:
        # Publish the merged list before the merged keys leave ``_new``: a key is always in
        # one of the two, whatever a writer appends meanwhile (appends land after ``taken``).
        new = self._new
        if new:
            taken = new[:]
            merged = self._sorted + taken
            merged.sort()
            self._sorted = merged
            del new[: len(taken)]
        return self._sorted

    def range_keys(self, start: bytes | None, end: bytes | None) -> list[bytes]:
        """Sorted keys in ``[start, end)`` as of now (a private list)."""
        with self._merging:
            new = self._new
            if len(new) > _MERGE_AT or len(new) * 8 > len(self._sorted):
                self._merge_locked()
            srt = self._sorted
            new = list(new)
        lo = 0 if start is None else bisect_left(srt, start)
        hi = len(srt) if end is None else bisect_left(srt, end)
        out = srt[lo:hi]
        if new:
            extra = [k for k in new if (start is None or k >= start) and (end is None or k < end)]
            if extra:
                extra.sort()
                out += extra
                out.sort()
        return out

    def items_in(
        self, start: bytes | None, end: bytes | None, seq: int | None, reverse: bool = False
    ) -> Iterator[tuple[bytes, int, int, bytes]]:
        """``(key, seq, kind, payload)`` in key order, as visible at ``seq``."""
        keys = self.range_keys(start, end)
        if reverse:
            keys.reverse()
        d = self.d
        if seq is None:
            for k in keys:
                e = d.get(k)
                if e is not None:
                    yield (k, e[0], e[1], e[2])
            return
        for k in keys:
            e = d.get(k)
            if e is not None and e[0] > seq:
                e = self._older(k, seq)
            if e is not None:
                yield (k, e[0], e[1], e[2])

    def sorted_items(self) -> tuple[list[bytes], list[int], list[int], list[bytes]]:
        """Columns of every (newest) entry in key order, for flushing to an SST."""
        keys = self.sorted_keys()
        ents = list(map(self.d.__getitem__, keys))
        return (
            list(keys),
            [e[0] for e in ents],
            [e[1] for e in ents],
            [e[2] for e in ents],
        )


def new_memtable() -> Memtable:
    """A data memtable with its index-tree memtable (``sub``)."""
    m = Memtable()
    m.sub = Memtable()
    return m
