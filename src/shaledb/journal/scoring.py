"""Scoring journal objects and choosing runs (docs/design/value-journal.md).

See ``shaledb.journal.compaction`` for the whole procedure. :class:`_Ledger`
is the keep/drop rule against one manifest's SSTs; :func:`score_file` samples
an object's block heads; :func:`best_run` and :func:`plan_runs` pick runs.
"""

from __future__ import annotations

import logging
import random
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from ..engine.memtable import Memtable
from ..engine.merging import chain_floor
from ..engine.range_tombstones import covering_seq, has_range_dels
from ..engine.reads import ReadView, Visibility, lookup
from ..engine.sstable import read_object_meta
from ..errors import CorruptionError, ObjectNotFound
from ..format import paths
from ..format.block import Block
from ..format.coding import CODEC_NONE, TRAILER_SIZE, u32_array, u64_array
from ..format.row import FLAG_INDEX_TREE, KIND_MERGE, KIND_TOMBSTONE, TYPE_MASK, payload_expiry
from ..format.sst import SstMeta, decode_data_block
from ..manifest.model import JournalFile, Manifest
from ..settings import JournalOptions
from ..store.base import ObjectStore
from .folds import last_of_batch
from .hosts import CompactionHost

log = logging.getLogger("shaledb.journal")

_HEAD_READ_BYTES = 2048
_U32 = struct.Struct("<I")


@dataclass
class FileScore:
    id: str
    db: int
    size: int
    score: float
    """Estimated percentage of the object's bytes compaction would keep."""
    sampled: int
    damaged: bool = False


KEEP, DROP, TOMB = 1, 0, 2
_CURRENT, _EXPIRED, _REPLACED, _MISSING = 0, 1, 2, 3


class _Ledger:
    """The ledger of one manifest (SSTs only) and the keep/drop rule."""

    def __init__(self, host: CompactionHost, m: Manifest, strategy: str) -> None:
        self.m = m
        self.tables = host.tables
        self.data = ReadView(Memtable(), (), m)
        self.index = ReadView(Memtable(), (), m, tree="index")
        self.vis = Visibility(lambda: int(host.clock.now() * 1000), None)
        self.retain = strategy == "retain"

    def keep(self, key: bytes, seq: int, kind: int) -> bool:
        """Whether compaction keeps this entry as it is (scoring: anything else is replaced)."""
        return self.decide(key, seq, kind, None) == KEEP

    def decide(self, key: bytes, seq: int, kind: int, payload: bytes | None) -> int:
        """KEEP, DROP or TOMB (keep as a tombstone) for one journal entry (module docstring, step 3).

        Under ``retain`` a value is dropped only when a newer entry of its key
        stays in the journal: the current, live value is kept; a value that
        has expired -- current, or gone from the ledger because compaction
        reaped it -- becomes a tombstone, so a rebuild cannot resurrect an
        older value of the key; a value the ledger holds a newer version of
        is dropped (that version, or its tombstone, is kept).
        """
        if kind & FLAG_INDEX_TREE:
            if self.retain:
                return KEEP
            return KEEP if self._status(self.index, key, seq) == _CURRENT else DROP
        status = self._status(self.data, key, seq)
        if kind & TYPE_MASK == KIND_TOMBSTONE:
            return KEEP if self.retain or status == _CURRENT else DROP
        if status == _CURRENT:
            return KEEP
        if not self.retain or status == _REPLACED or payload is None:
            return DROP
        # Current but expired, or missing from the ledger: keep the key change.
        if status == _EXPIRED:
            return TOMB
        try:
            expires = payload_expiry(kind, payload)
        except CorruptionError:
            return DROP
        return TOMB if expires is not None and expires <= self.vis.now_ms() else DROP

    def _status(self, view: ReadView, key: bytes, seq: int) -> int:
        e = lookup(view, self.tables, key, None)
        if e is None:
            return _MISSING
        if e[0] != seq:
            if e[1] == KIND_MERGE and seq < e[0] and seq >= self._chain_floor(view, key):
                return _CURRENT  # the base or an operand of the current merge: reads need it
            return _REPLACED
        if e[1] & TYPE_MASK == KIND_TOMBSTONE or self.vis.alive(e[1], e[2]):
            return _CURRENT
        return _EXPIRED

    def _chain_floor(self, view: ReadView, key: bytes) -> int:
        floor = covering_seq(view, self.tables, key, None) if has_range_dels(view) else 0
        return chain_floor(view.memtables(), view.l0, view.runs, self.tables, key, floor)


# ----------------------------------------------------------------- scoring


def read_journal_meta(store: ObjectStore, jf: JournalFile) -> SstMeta:
    return read_object_meta(store, paths.journal_object_path(jf.id), jf.size)


def block_head(raw: bytes) -> tuple[list[bytes], list[int], bytes, list[int]] | int:
    """Keys, seqs, kinds and payload sizes from the first bytes of an uncompressed
    stored block; or the number of bytes needed when ``raw`` is too short."""
    if len(raw) < 4:
        return 4
    n: int = _U32.unpack_from(raw, 0)[0]
    if n > (1 << 24):
        raise CorruptionError(f"block claims {n} entries")
    fixed = 4 + 8 * (n + 1) + 9 * n
    if len(raw) < fixed:
        return fixed
    key_off = u32_array(raw, 4, n + 1, "block key offsets")
    val_off = u32_array(raw, 4 + 4 * (n + 1), n + 1, "block value offsets")
    need = fixed + int(key_off[-1])
    if len(raw) < need:
        return need
    seqs = u64_array(raw, 4 + 8 * (n + 1), n, "block sequence numbers").tolist()
    kinds = raw[4 + 8 * (n + 1) + 8 * n : fixed]
    keys = [raw[fixed + key_off[i] : fixed + key_off[i + 1]] for i in range(n)]
    if key_off.tolist() != sorted(key_off.tolist()) or val_off.tolist() != sorted(val_off.tolist()):
        raise CorruptionError("block offsets decrease")
    sizes = [val_off[i + 1] - val_off[i] for i in range(n)]
    return keys, seqs, bytes(kinds), sizes


def score_file(host: CompactionHost, ledger: _Ledger, jf: JournalFile, sample: int) -> FileScore:
    """Leveled's score of one journal object (module docstring, step 1)."""
    store = host.store_for(jf.db)
    path = paths.journal_object_path(jf.id)
    try:
        meta = read_journal_meta(store, jf)
        nb = len(meta.index)
        if nb == 0:
            return FileScore(jf.id, jf.db, jf.size, 0.0, 0)
        per_block = max(1.0, meta.props.entries / nb)
        want = max(1, min(nb, round(sample / per_block)))
        rng = random.Random(zlib.crc32(jf.id.encode()))
        chosen = sorted(rng.sample(range(nb), want))
        rows = _sample_blocks(store, path, meta, chosen)
    except (CorruptionError, ObjectNotFound) as exc:
        log.warning("journal object %s cannot be scored (left alone): %s", path, exc)
        return FileScore(jf.id, jf.db, jf.size, 100.0, 0, damaged=True)
    active = replaced = 0
    for keys, seqs, kinds, sizes in rows:
        last = last_of_batch(keys, seqs)
        for i, k in enumerate(keys):
            size = len(k) + sizes[i]
            if last[i] and ledger.keep(k, seqs[i], kinds[i]):
                active += size
            else:
                replaced += size
    total = active + replaced
    score = 100.0 * active / total if total else 0.0
    return FileScore(jf.id, jf.db, jf.size, score, sum(len(r[0]) for r in rows))


def _sample_blocks(
    store: ObjectStore, path: str, meta: SstMeta, chosen: list[int]
) -> list[tuple[list[bytes], list[int], bytes, list[int]]]:
    offs = meta.index.offsets
    codec_none = meta.props.codec == CODEC_NONE
    spans = [(offs[i], offs[i + 1]) for i in chosen]
    if codec_none:
        reads = [(a, min(b - TRAILER_SIZE, a + _HEAD_READ_BYTES)) for a, b in spans]
    else:
        reads = list(spans)
    raws = store.get_ranges(path, reads)
    out = []
    again: list[int] = []
    for j, raw in enumerate(raws):
        if not codec_none:
            out.append(_sampled(decode_data_block(raw)))
            continue
        head = block_head(raw)
        if isinstance(head, int):
            again.append(j)
            out.append(([], [], b"", []))
        else:
            out.append(head)
    if again:
        more = store.get_ranges(path, [spans[j] for j in again])
        for j, raw in zip(again, more):
            out[j] = _sampled(decode_data_block(raw))
    return out


def _sampled(b: Block) -> tuple[list[bytes], list[int], bytes, list[int]]:
    """A decoded block's keys, seqs, kinds and payload lengths (what scoring samples)."""
    return list(b.keys), b.seqs.tolist(), bytes(b.kinds), [len(b.payload(i)) for i in range(len(b))]


def best_run(scores: Sequence[float], opts: JournalOptions) -> tuple[int, int, float] | None:
    """``(start, length, run score)`` of the most rewarding run, or None (module docstring, step 2)."""
    n = len(scores)
    mrl = opts.max_run_length
    sf, mr = opts.single_file_target_pct, opts.max_run_target_pct
    best: tuple[int, int, float] | None = None
    for length in range(1, min(mrl, n) + 1):
        target = sf if mrl == 1 else sf + (mr - sf) / (mrl - 1) * (length - 1)
        window = sum(scores[:length])
        for start in range(0, n - length + 1):
            if start:
                window += scores[start + length - 1] - scores[start - 1]
            rs = target - window / length
            if best is None or rs > best[2] + 1e-9 or (abs(rs - best[2]) <= 1e-9 and length > best[1]):
                best = (start, length, rs)
    if best is None or best[2] <= 0:
        return None
    return best


def plan_runs(
    scores: Sequence[float], opts: JournalOptions, limit: int | None
) -> list[tuple[int, int, float]]:
    """The runs one pass compacts: the best run, then the best among the rest, and so on
    (runs never overlap), in journal order."""
    s = list(scores)
    picks: list[tuple[int, int, float]] = []
    while limit is None or len(picks) < limit:
        b = best_run(s, opts)
        if b is None:
            break
        picks.append(b)
        for i in range(b[0], b[0] + b[1]):
            s[i] = _TAKEN
    return sorted(picks)


_TAKEN = 1e9
"""Score given to objects a pass already picked: no window containing one can win."""


__all__ = [
    "DROP",
    "KEEP",
    "TOMB",
    "FileScore",
    "best_run",
    "block_head",
    "plan_runs",
    "read_journal_meta",
    "score_file",
]
