"""Reading one checkpoint as columns, key range by key range (the Spark reader's engine).

A bulk read has two steps, like a bulk ingest:

1. :func:`plan_read` (driver) pins a version -- an existing checkpoint, or a
   new one with a lifetime -- and cuts ``[start, end)`` into key ranges of
   similar size from the SST boundaries of that version (and block
   boundaries inside SSTs too big for one range). Each
   :class:`ReadPart` carries everything a task needs: its range, the SSTs of
   each source that overlap it, the WAL ids the version still replays (or,
   when they are small, their entries in the range) and the clone parents'
   URLs. Planning reads manifests, the indexes of big SSTs, and small WALs.
2. :func:`read_part` (a task) merges the sources of its range and yields
   :class:`Columns` of live entries in key order: the newest version of each
   key at the checkpoint, tombstones and expired entries dropped.

Why the parts carry their SSTs: a task then needs no manifest to find its
data, only one manifest read to check that the checkpoint still lives (and
to refresh a checkpoint the plan created, see :func:`ensure_checkpoint`).
The data of a checkpoint is its manifest's SSTs plus the WAL objects in
``(replay_after_wal_id, next_wal_id)``; WAL entries are the newest source.

How it is fast: sources are read forward with large ranged GETs and decoded
block by block; the key range is cut into chunks of about ``chunk_bytes`` at
block boundaries, and each chunk is merged column-wise with the compaction
executor's ``merge_columns`` (a settled database has one source per range,
which that function passes through untouched).
"""

from __future__ import annotations

import random
import uuid
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from ..admin.checkpoint import (
    as_checkpoint_ref,
    create_checkpoint,
    durable_wal_tail,
    live_checkpoint,
    read_checkpoint_manifest,
    refresh_checkpoint,
)
from ..clock import SYSTEM_CLOCK, Clock
from ..engine.cache import LruCache
from ..engine.columns import SourceCursor, chunk_cuts, drop_covered, drop_dead, merge_columns
from ..engine.history import has_versions
from ..engine.merging import (
    OPT_MERGE_OPERATOR,
    Folder,
    complete_columns,
    fold_columns,
    has_merges,
    plain_base_value,
    stack,
)
from ..engine.parents import default_factory
from ..engine.sstable import read_sst_meta
from ..engine.wal_read import fetch_wal_objects
from ..errors import CorruptionError, InvalidArgument, MergeOperatorMissing, NotSupported
from ..format import paths
from ..format.merge import decode_merge
from ..format.range_dels import KIND_RANGE_DEL, Fragments, RangeDel, merge_fragments
from ..format.row import (
    EXTRA_FLAGS,
    FLAG_INDEX_TREE,
    KIND_MERGE,
    KIND_POINTER,
    KIND_TOMBSTONE,
    KIND_VALUE,
    TYPE_MASK,
    decode_payload,
)
from ..format.sst import SstMeta
from ..format.wal import EpochGate, decode_wal_object
from ..journal.resolver import JournalResolver
from ..keys import key_after
from ..manifest.model import Checkpoint, Manifest, SstInfo
from ..manifest.store import ManifestStore
from ..settings import WAL_READ_AHEAD, MiB, Settings
from ..store.base import ObjectStore
from ..store.stack import open_stack

Columns = tuple[list[bytes], list[int], bytes, list[bytes]]
"""keys, seqs, kinds, payloads of live entries in key order."""

DEFAULT_INLINE_WAL_BYTES = 16 * MiB
"""A Spark read's plan reads the WAL objects once and hands each part its entries when they
hold at most this many bytes; above it each task reads them (they travel in the tasks)."""
DEFAULT_TARGET_BYTES = 128 * MiB
"""The largest part a read plans by default (Spark's ``maxPartitionBytes``)."""
DEFAULT_LIFETIME_S = 3600.0
MIN_PART_BYTES = 4 * MiB
"""Parts are not made smaller than this to fill task slots (Spark's ``openCostInBytes``)."""
MAX_INDEXES_READ = 64
"""Planning reads at most this many SST indexes for cut points inside SSTs."""


@dataclass(frozen=True, slots=True)
class ReadPart:
    """One key range ``[lo, hi)`` of a pinned version and where its data lives (picklable)."""

    index: int
    lo: bytes | None
    hi: bytes | None
    checkpoint_id: str
    manifest_id: int
    sources: tuple[tuple[SstInfo, ...], ...]
    """Newest first: each L0 SST alone, then each sorted run's SSTs in the range."""
    wal_ids: tuple[int, ...]
    last_l0_seq: int
    external: tuple[str, ...] = ()
    """URLs of ``Manifest.external_dbs`` (SSTs with ``db = i`` live in ``external[i - 1]``)."""
    l0_count: int = 0
    """How many of ``sources`` (the first ones) are L0 SSTs; the rest are sorted runs."""
    journal: tuple[tuple[str, int], ...] = ()
    """``(id, db)`` of the version's value-journal files (pointers are resolved through them)."""
    wal: Columns | None = None
    """The version's WAL entries in ``[lo, hi)`` (newest per key, key order), when the plan read
    the WAL for every part (``inline_wal_bytes``); None: the task reads ``wal_ids`` itself."""
    versions: bool = False
    """An SST may hold several versions of a key (a history window, ``shaledb.engine.history``)."""
    merge_operator: str | None = None
    """The merge operator the database records (``shaledb.merge``): merges fold with it."""

    @property
    def bytes(self) -> int:
        return sum(s.size for src in self.sources for s in src)


@dataclass(frozen=True, slots=True)
class ReadPlan:
    """The parts of one read and the checkpoint they read."""

    checkpoint_id: str
    manifest_id: int
    created: bool
    """True if the plan created its checkpoint (it should be released or left to expire)."""
    lifetime_s: float | None
    parts: tuple[ReadPart, ...]


@contextmanager
def _stack(
    url: str | None, store: ObjectStore | None, store_options: Mapping[str, Any] | None, clock: Clock
) -> Iterator[ObjectStore]:
    """The store stack to read through, closed on exit when opened here from ``url``: Spark
    reuses its Python workers, and a local store's cached read descriptors would otherwise
    keep SSTs (and their disk space) open after the garbage collector deletes them."""
    st = open_stack(url, store, store_options, Settings(), clock, random.Random())
    try:
        yield st
    finally:
        if store is None:
            st.close()


def intersect(
    a: tuple[bytes | None, bytes | None], b: tuple[bytes | None, bytes | None]
) -> tuple[bytes | None, bytes | None]:
    """The intersection of two ``[lo, hi)`` ranges (None is unbounded)."""
    lo = a[0] if b[0] is None or (a[0] is not None and a[0] > b[0]) else b[0]
    hi = a[1] if b[1] is None or (a[1] is not None and a[1] < b[1]) else b[1]
    return lo, hi


def _overlaps(s: SstInfo, lo: bytes | None, hi: bytes | None) -> bool:
    has_data = s.entries > 0 or s.range_dels > 0  # (an SST of range tombstones only counts)
    return (hi is None or s.first_key < hi) and (lo is None or s.last_key >= lo) and has_data


def split_range(
    ssts: Sequence[SstInfo],
    lo: bytes | None,
    hi: bytes | None,
    n: int,
    inner: Sequence[bytes] = (),
) -> list[tuple[bytes | None, bytes | None]]:
    """Cut ``[lo, hi)`` into up to ``n`` ranges of similar SST bytes, at SST boundaries.

    ``inner`` adds cut points inside SSTs (:func:`inner_cuts`: block
    boundaries of the big ones). Each SST's bytes are assumed spread evenly
    over the boundaries inside it; fewer ranges come back when there are too
    few boundaries.
    """
    inside = [s for s in ssts if _overlaps(s, lo, hi)]
    if n <= 1 or not inside:
        return [(lo, hi)]
    bounds = sorted(
        {b for s in inside for b in (s.first_key, key_after(s.last_key))}.union(inner)
        - {lo}
        - ({hi} if hi is not None else set())
    )
    low = min(s.first_key for s in inside)
    high = max(key_after(s.last_key) for s in inside)
    # Cuts outside the data would only make empty ranges.
    bounds = [b for b in bounds if (lo is None or b > lo) and (hi is None or b < hi) and low < b < high]
    if not bounds:
        return [(lo, hi)]
    weight = [0.0] * (len(bounds) + 1)  # weight[i]: bytes between bounds[i - 1] and bounds[i]
    for s in inside:
        a = bisect_right(bounds, s.first_key)
        b = bisect_left(bounds, key_after(s.last_key))
        span = b - a + 1
        for i in range(a, b + 1):
            weight[i] += s.size / span
    below = list(accumulate(weight[:-1]))  # below[i]: bytes before bounds[i]
    total = below[-1] + weight[-1]
    cuts: list[bytes] = []
    done = 0.0  # bytes before the last cut: a cut must add some
    for k in range(1, n):
        # The bound nearest k/n of the bytes, either side: the first one past it could
        # leave 128 of 135 MB in the first half of two (SSTs of 64, 64 and 7 MB).
        t = total * k / n
        i = bisect_left(below, t)
        if i > 0 and below[i - 1] > done and (i == len(below) or t - below[i - 1] <= below[i] - t):
            i -= 1
        if i < len(below) and below[i] > done:
            cuts.append(bounds[i])
            done = below[i]
    edges: list[bytes | None] = [lo, *cuts, hi]
    return [(edges[i], edges[i + 1]) for i in range(len(edges) - 1)]


def part_count(in_range: int, target_bytes: int, parallelism: int) -> int:
    """How many parts a read of ``in_range`` SST bytes gets by default.

    Spark's rule for files: parts of ``in_range / parallelism`` bytes, but
    at most ``target_bytes`` and at least :data:`MIN_PART_BYTES`; and then a
    multiple of ``parallelism`` (the cluster's task slots), since three
    parts on two slots take as long as four. Measured on two slots, 136 MB:
    two parts 0.32 s, three 0.39 s, four 0.41 s, eight 0.55 s (a task costs
    ~40 ms of its own).
    """
    slots = max(1, parallelism)
    part = min(max(1, target_bytes), max(MIN_PART_BYTES, -(-in_range // slots)))
    n = max(1, -(-in_range // part))
    return n if n <= slots else -(-n // slots) * slots


def inner_cuts(
    store: ObjectStore, ssts: Sequence[SstInfo], lo: bytes | None, hi: bytes | None, n: int
) -> list[bytes]:
    """Cut points inside the SSTs with more of ``[lo, hi)`` than a part of ``n`` holds.

    A version with few, large SSTs (a bulk load, a settled tree) has too few
    SST boundaries to cut ``n`` even parts. The index of each such SST (one
    ranged read; at most :data:`MAX_INDEXES_READ` of them, the largest, and
    only this database's own) gives the ends of its blocks in the range:
    about eight cut points per part's share of bytes. Parts of less than
    :data:`MIN_PART_BYTES` are not worth it: then SST boundaries must do.
    """
    inside = [s for s in ssts if _overlaps(s, lo, hi)]
    share = sum(s.size for s in inside) / max(1, n)
    if share < MIN_PART_BYTES:
        return []
    big = sorted((s for s in inside if s.size > share and not s.db), key=lambda s: -s.size)
    out: list[bytes] = []
    for s in big[:MAX_INDEXES_READ]:
        keys = read_sst_meta(store, s).index.keys
        a = 0 if lo is None else bisect_left(keys, lo)
        b = len(keys) if hi is None else bisect_left(keys, hi)
        if s.size * (b - a) <= share * len(keys):  # the range holds no more than a part of it
            continue
        step = max(1, int(len(keys) * share / (8 * s.size)))
        out.extend(key_after(k) for k in keys[a + step - 1 : b : step])
    return out


def _sources(m: Manifest, lo: bytes | None, hi: bytes | None) -> tuple[tuple[SstInfo, ...], ...]:
    out: list[tuple[SstInfo, ...]] = [(s,) for s in m.data.l0 if _overlaps(s, lo, hi)]
    for run in m.data.runs:
        ssts = tuple(s for s in run.ssts if _overlaps(s, lo, hi))
        if ssts:
            out.append(ssts)
    return tuple(out)


SHARED_READ = (("shared_read", "1"),)
"""The metadata of a checkpoint a read made to be shared (``plan_read(reuse=True)``): only
those are reused, never one that its maker deletes when done."""


def reusable_checkpoint(
    m: Manifest, store: ObjectStore, name: str, lifetime_s: float | None, now_s: float
) -> Checkpoint | None:
    """A live checkpoint named ``name`` that a new read may share: it pins ``m``, the latest
    manifest, no WAL object exists after that manifest's range (one listing, as creating
    one makes), it was made to be shared (:data:`SHARED_READ`) and at least half of
    ``lifetime_s`` is left. None otherwise (and for a checkpoint that never expires)."""
    if lifetime_s is None:
        return None
    for cp in m.checkpoints:
        if (
            cp.name == name
            and cp.manifest_id == m.id
            and cp.writer_epoch is None
            and cp.metadata == SHARED_READ
            and cp.expire_time_s is not None
            and cp.expire_time_s - now_s >= lifetime_s / 2
        ):
            if durable_wal_tail(store, m.next_wal_id - 1) != m.next_wal_id - 1:
                return None  # writes since (in the WAL): a new version to pin
            return cp
    return None


def plan_read(
    url: str | None = None,
    *,
    checkpoint: uuid.UUID | str | None = None,
    start: bytes | None = None,
    end: bytes | None = None,
    partitions: int | None = None,
    parallelism: int = 1,
    target_bytes: int = DEFAULT_TARGET_BYTES,
    lifetime_s: float | None = DEFAULT_LIFETIME_S,
    name: str = "bulk-read",
    inline_wal_bytes: int = 0,
    reuse: bool = False,
    store: ObjectStore | None = None,
    store_options: Mapping[str, Any] | None = None,
    clock: Clock | None = None,
) -> ReadPlan:
    """Pin a version and cut ``[start, end)`` into parts (see module docstring).

    Without ``checkpoint`` a new one named ``name`` is created with
    ``lifetime_s`` (covering every write already durable in the WAL).
    ``partitions`` fixes the number of parts (at most; fewer when the version
    has too few SST and block boundaries); by default one part per
    ``target_bytes``, at least ``parallelism`` and a multiple of it
    (:func:`part_count`). Parts are cut at SST boundaries, and inside SSTs
    too big for one part at their blocks' ends (:func:`inner_cuts`).
    When the version's WAL objects hold at most ``inline_wal_bytes``, they are
    read here once and each part carries its entries (:attr:`ReadPart.wal`):
    otherwise every task reads all of them, having no key order to skip by.

    ``reuse``: instead of creating a checkpoint, take a live one named ``name`` that pins
    the latest manifest when nothing was written since (no newer manifest, no WAL object
    after its range) and at least half of ``lifetime_s`` is left (:func:`reusable_checkpoint`).
    For callers that never delete the checkpoints they create (a Spark read lets them
    lapse): repeated queries of an unchanged database then write nothing.
    """
    clock = clock or SYSTEM_CLOCK
    with _stack(url, store, store_options, clock) as st:
        ms = ManifestStore(st, clock, random.Random(), author="bulk-read")
        created = checkpoint is None
        found = None
        if checkpoint is None:
            if reuse:
                found = reusable_checkpoint(ms.require_latest(), st, name, lifetime_s, clock.now())
            cp = found or create_checkpoint(
                ms,
                clock=clock,
                rng=random.Random(),
                timeout_s=60.0,
                lifetime=lifetime_s,
                name=name,
                metadata=dict(SHARED_READ) if reuse else None,
            )
            ref: uuid.UUID | str = cp.id
        else:
            ref = as_checkpoint_ref(checkpoint)
        if found is None:  # (a reused one is live in the manifest just read)
            cp = live_checkpoint(ms.require_latest(), ref, clock.now(), st.describe())
        cp_id = cp.id  # (a name resolved: every part reads this very checkpoint)
        m = read_checkpoint_manifest(ms, cp)
        ssts = list(m.data.ssts())
        if partitions is None:
            in_range = sum(s.size for s in ssts if _overlaps(s, start, end))
            partitions = part_count(in_range, target_bytes, parallelism)
        if partitions < 1:
            raise InvalidArgument(f"partitions must be positive, got {partitions}")
        inner = inner_cuts(st, ssts, start, end, partitions) if partitions > 1 else []
        wal_ids = tuple(range(m.replay_after_wal_id + 1, m.next_wal_id))
        external = tuple(e.url for e in m.external_dbs)
        journal = tuple((j.id, j.db) for j in m.journal)
        ranges = split_range(ssts, start, end, partitions, inner)
        wal = None
        if wal_ids and inline_wal_bytes > 0 and _wal_bytes(st, wal_ids) <= inline_wal_bytes:
            wal, rdels = _wal_scan(st, wal_ids, m.last_l0_seq, start, end)
            if rdels:
                wal = None  # range deletes in the WAL: each task reads it (read_part)
        parts = tuple(
            ReadPart(
                i,
                lo,
                hi,
                str(cp_id),
                m.id,
                _sources(m, lo, hi),
                wal_ids,
                m.last_l0_seq,
                external,
                sum(1 for s in m.data.l0 if _overlaps(s, lo, hi)),
                journal,
                None if wal is None else _slice_columns(wal, lo, hi),
                has_versions(m),
                m.option(OPT_MERGE_OPERATOR),
            )
            for i, (lo, hi) in enumerate(ranges)
        )
        return ReadPlan(str(cp_id), m.id, created, lifetime_s if created else None, parts)


def _wal_bytes(st: ObjectStore, wal_ids: Sequence[int]) -> int:
    """The stored size of the WAL objects ``wal_ids`` (one LIST)."""
    first, last = wal_ids[0], wal_ids[-1]
    total = 0
    for meta in st.list(paths.WAL_DIR, offset=paths.wal_path(first - 1)):
        wid = paths.parse_wal_id(meta.path)
        if wid is not None and first <= wid <= last:
            total += meta.size
    return total


def _slice_columns(cols: Columns, lo: bytes | None, hi: bytes | None) -> Columns:
    keys = cols[0]
    a = 0 if lo is None else bisect_left(keys, lo)
    b = len(keys) if hi is None else bisect_left(keys, hi)
    return keys[a:b], cols[1][a:b], cols[2][a:b], cols[3][a:b]


def ensure_checkpoint(
    url: str | None,
    checkpoint_id: str,
    *,
    refresh_lifetime_s: float | None = None,
    store: ObjectStore | None = None,
    store_options: Mapping[str, Any] | None = None,
    clock: Clock | None = None,
) -> float | None:
    """Check that the checkpoint lives; returns its expiry time (None: never).

    With ``refresh_lifetime_s`` (for a checkpoint the read created) the expiry
    is pushed to now + that lifetime once less than half of it is left, so a
    read keeps its version alive while it runs and lets it lapse after.

    Raises:
        CheckpointNotFound: it expired or was deleted (the read must start over).
    """
    clock = clock or SYSTEM_CLOCK
    with _stack(url, store, store_options, clock) as st:
        ms = ManifestStore(st, clock, random.Random(), author="bulk-read")
        now = clock.now()
        cp = live_checkpoint(ms.require_latest(), as_checkpoint_ref(checkpoint_id), now, st.describe())
        if (
            refresh_lifetime_s is not None
            and cp.expire_time_s is not None
            and cp.expire_time_s - now < refresh_lifetime_s / 2
        ):
            cp = refresh_checkpoint(ms, cp.id, clock=clock, timeout_s=60.0, lifetime=refresh_lifetime_s)
        return cp.expire_time_s


# ------------------------------------------------------------------ reading


def _wal_columns(store: ObjectStore, part: ReadPart) -> Columns:
    """The checkpoint's WAL entries in the part's range: newest version per key, in key order."""
    return _wal_part(store, part)[0]


def _wal_part(store: ObjectStore, part: ReadPart) -> tuple[Columns, list[RangeDel]]:
    """:func:`_wal_columns` and the WAL's range deletes that overlap the part's range."""
    if part.wal is not None:
        return part.wal, []
    return _wal_scan(store, part.wal_ids, part.last_l0_seq, part.lo, part.hi)


def _wal_scan(
    store: ObjectStore, wal_ids: Sequence[int], last_l0_seq: int, lo: bytes | None, hi: bytes | None
) -> tuple[Columns, list[RangeDel]]:
    newest: dict[bytes, tuple[int, int, bytes]] = {}
    gate = EpochGate()
    rdels: list[RangeDel] = []
    with fetch_wal_objects(store, wal_ids, WAL_READ_AHEAD) as fetched:
        for path, data in fetched:
            if data is None:
                continue  # a slot a crashed writer never filled
            if not gate.admit(data, path):
                continue  # a crashed writer's object after the next writer's fence
            keys, ents = decode_wal_object(data, path)
            for k, e in zip(keys, ents):
                if e[1] & FLAG_INDEX_TREE:
                    continue  # a secondary-index entry (the index tree)
                if e[1] == KIND_RANGE_DEL:
                    if e[0] > last_l0_seq and (hi is None or k < hi) and (lo is None or e[2] > lo):
                        rdels.append((k, e[2], e[0]))
                        # a later merge of a covered key stacks onto the deletion, not the old entry
                        for ck in [ck for ck in newest if k <= ck < e[2]]:
                            newest[ck] = (e[0], KIND_TOMBSTONE, b"")
                    continue
                if e[0] > last_l0_seq and (lo is None or k >= lo) and (hi is None or k < hi):
                    # WAL order is sequence order: later entries win, merges stack
                    newest[k] = e if e[1] != KIND_MERGE else stack(newest.get(k), e[0], decode_merge(e[2])[1])
    ks = sorted(newest)
    ents = [newest[k] for k in ks]
    return (ks, [e[0] for e in ents], bytes(e[1] for e in ents), [e[2] for e in ents]), rdels


def sst_meta_cache(store_for: Callable[[SstInfo], ObjectStore]) -> Callable[[SstInfo], SstMeta]:
    """``read_sst_meta`` that reads each SST's index and filter once: a part's chunking,
    its cursors and its ranges all ask for them."""
    metas: dict[str, SstMeta] = {}

    def meta(info: SstInfo) -> SstMeta:
        m = metas.get(info.id)
        if m is None:
            m = metas[info.id] = read_sst_meta(store_for(info), info)
        return m

    return meta


def read_part(
    part: ReadPart,
    url: str | None = None,
    *,
    store: ObjectStore | None = None,
    store_options: Mapping[str, Any] | None = None,
    chunk_bytes: int = 8 * MiB,
    read_ahead_bytes: int = 8 * MiB,
    clock: Clock | None = None,
    now_ms: int | None = None,
) -> Iterator[Columns]:
    """Live entries of ``part`` in key order, in chunks of about ``chunk_bytes`` of input.

    The caller checks the checkpoint first (:func:`ensure_checkpoint`).
    """
    clock = clock or SYSTEM_CLOCK
    with _stack(url, store, store_options, clock) as st, ExitStack() as opened:
        factory = default_factory(Settings().retry, clock, random.Random(), store_options)
        external: dict[int, ObjectStore] = {}

        def store_of(db: int) -> ObjectStore:
            """The store of database ``db`` of the checkpoint (0: this one, i: its i-th parent)."""
            if db == 0:
                return st
            if not 0 < db <= len(part.external):
                raise CorruptionError(f"an object refers to external database #{db}")
            if db not in external:
                external[db] = opened.enter_context(closing(factory(part.external[db - 1])))
            return external[db]

        def store_for(info: SstInfo) -> ObjectStore:
            return store_of(info.db)

        now = int(clock.now() * 1000) if now_ms is None else now_ms
        journal: JournalResolver | None = None

        meta = sst_meta_cache(store_for)
        srcs = [
            SourceCursor(ssts, part.lo, part.hi, meta=meta, store_for=store_for, read_ahead=read_ahead_bytes)
            for ssts in part.sources
        ]
        wal, wal_rdels = _wal_part(st, part) if part.wal_ids else (None, [])
        # Range tombstones of the checkpoint (SSTs' range-del blocks, WAL range deletes).
        frags = merge_fragments(
            [
                *(meta(s).range_dels for src in part.sources for s in src if s.range_dels),
                Fragments.build(wal_rdels),
            ]
        ).clip(part.lo, part.hi)
        cuts = chunk_cuts([b for s in srcs for b in s.blocks()], chunk_bytes, part.lo, part.hi)
        wal_keys = wal[0] if wal is not None else []
        wpos = 0
        for upto in [*cuts, None]:
            cols = [s.take(upto) for s in reversed(srcs)]  # oldest first
            if wal is not None:
                wend = len(wal_keys) if upto is None else bisect_left(wal_keys, upto, wpos)
                cols.append((wal[0][wpos:wend], wal[1][wpos:wend], wal[2][wpos:wend], wal[3][wpos:wend]))
                wpos = wend
            if has_merges(cols):  # (a range tombstone below a merge is its base)
                if journal is None and part.journal:
                    journal = JournalResolver(store_of, LruCache(16 * MiB))
                    journal.note_files(part.journal)
                cols = [_folded(complete_columns(cols, frags), part, now, journal)]
            merged = merge_columns(cols)
            if frags:
                merged = drop_covered(merged, frags, None)
            merged = drop_dead(merged, bottom=True, now_ms=now)
            if merged[0]:
                if _POINTER_BYTE in merged[2].translate(_IS_POINTER):
                    if journal is None:
                        journal = JournalResolver(store_of, LruCache(16 * MiB))
                        journal.note_files(part.journal)
                    merged = resolve_pointers(merged, journal)
                yield merged


def _folded(cols: Columns, part: ReadPart, now_ms: int, journal: JournalResolver | None) -> Columns:
    """Every merge entry of ``cols`` (all of a version's sources) folded into a value with
    the ready operator the database records (a base in the value journal is read from
    it); other operators are refused, not guessed."""
    resolve = None if journal is None else journal.resolve
    out = fold_columns(
        cols,
        bottom=True,
        folder=Folder(None, part.merge_operator),
        base_value=plain_base_value(now_ms, resolve),
        journal=True,
    )
    if KIND_MERGE in out[2]:
        raise MergeOperatorMissing(
            f"the database's merges need merge operator {part.merge_operator!r}, which a bulk read "
            "cannot fold (only the ready ones of shaledb.merge): compact the database first, or read "
            "it with DbReader(options=DbReaderOptions(merge_operator=...))"
        )
    return out


_IS_POINTER = bytes(int(k & TYPE_MASK == KIND_POINTER) for k in range(256))
_POINTER_BYTE = b"\x01"


def resolve_pointers(cols: Columns, journal: JournalResolver) -> Columns:
    """``cols`` with every POINTER entry turned into a VALUE entry holding its value
    (extras kept), read from the value journal."""
    keys, seqs, kinds, pays = cols
    kb = bytearray(kinds)
    pays = list(pays)
    for i, t in enumerate(kinds):
        if t & TYPE_MASK != KIND_POINTER:
            continue
        p = pays[i]
        body = decode_payload(t, p)[0]
        value = journal.resolve(keys[i], body)
        pays[i] = p[: len(p) - len(body)] + value
        kb[i] = (t & ~TYPE_MASK) | KIND_VALUE
    return keys, seqs, bytes(kb), pays


def values_and_metadata(kinds: bytes, payloads: list[bytes]) -> tuple[list[bytes], list[bytes | None] | None]:
    """User values (and metadata, None when no entry has any) of live entries' payloads."""
    if not kinds or kinds.count(0) == len(kinds):
        return payloads, None
    values = list(payloads)
    metas: list[bytes | None] = [None] * len(payloads)
    for i, t in enumerate(kinds):
        if not t:
            continue
        if t & TYPE_MASK == KIND_POINTER:
            raise NotSupported("a value-journal pointer reached values_and_metadata: resolve it first")
        if t & EXTRA_FLAGS:
            values[i], metas[i], _ = decode_payload(t, payloads[i])
    return values, metas


__all__ = [
    "Columns",
    "ReadPart",
    "ReadPlan",
    "ensure_checkpoint",
    "intersect",
    "plan_read",
    "read_part",
    "split_range",
    "sst_meta_cache",
    "values_and_metadata",
]
