"""Journal compaction on an object store (see docs/design/value-journal.md).

The value journal is the list of journal files in the manifest (WAL objects
kept once their writes reached L0, and objects this module writes). A value
that was overwritten, deleted or expired still occupies its journal object;
compaction reclaims that space without ever touching a value a live reader
may still need.

1. **Score.** Against the ledger of one manifest (its SSTs only, so writes
   still in memtables count as not yet superseding anything: conservative),
   each journal object gets Leveled's score: the estimated percentage of its
   bytes that compaction would keep. The estimate samples about
   ``JournalOptions.sample_entries`` entries from randomly chosen blocks,
   reading only each block's head (entry count, offsets, sequence numbers,
   kinds and keys come before the values in a block), so scoring a journal
   of 64 KiB values reads a few hundred KiB per object, not the values. The
   choice of blocks is seeded by the object's name: the same object scores
   the same against the same ledger, which makes compaction converge.
2. **Pick runs.** For every run of 1..``max_run_length`` consecutive objects,
   ``target(L) = SF + (MR - SF) / (MRL - 1) * (L - 1)`` (SF, MR: the single-object
   and full-run targets; SF when MRL = 1) and ``score = target(L) - mean(scores)``.
   The best score wins (ties: the longer run); nothing is done unless it is
   above 0. With the defaults (30, 70, 8) a lone object must be under 30 %
   live and a run of 8 under 70 % on average. A pass takes the best run, then
   the best among the objects left, and so on (runs never overlap), and
   handles them together: one ledger repoint and one commit per pass. Passes
   repeat until one finds nothing.
3. **Rewrite.** Each object of the run is read whole (CRC-checked) and each
   entry kept or dropped: a data value is kept if it is the key's current,
   live version in the ledger; under the ``retain`` strategy the key changes
   of superseded writes are kept too -- their index-tree entries and
   tombstones, which is all ``rebuild-ledger`` needs to replay index history
   (the value itself is dropped: Leveled's conversion to a key-delta record);
   under ``recovr`` only current entries are kept. Kept entries go, in
   sequence order, into new ``journal/<ULID>.journal`` objects (the journal
   object format: a WAL-like SST of kind 2), cut at ``journal_max_bytes``.
   A damaged block is dropped (its values are already lost; reported).
4. **Repoint and commit.** The ledger SSTs whose pointers move (data-tree
   SSTs whose sequence range meets the run's) are rewritten with the new
   pointers -- they hold keys, metadata and pointers, so they are small --
   and one manifest CAS swaps them and replaces the runs in the journal list.
   The CAS re-validates like a compaction commit: the run must still be in
   the journal list, the replaced SSTs still in the tree, and any SST that
   appeared meanwhile and may hold pointers into the run (a ledger
   compaction's output) is scanned and repointed first, then the CAS is
   tried again. A flush or a compaction that wins the race is therefore
   retried, never lost; a ledger compaction whose sources we replaced
   aborts and reschedules, as for any compaction conflict.
5. **Leave the old objects to GC.** They stay until no active manifest (the
   latest, or one a live checkpoint pins -- every snapshot and reader pins
   one) references them and they are older than ``min_age_s``. A live
   snapshot therefore blocks the deletion, never the compaction.

While it runs, a job lease (``compactions/<ULID>.job``, the compactor's
mechanism) keeps the garbage collector away from its unreferenced outputs.
A repeat run finds the rewritten objects fully current (score 100) and
rewrites nothing.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..compaction.compactor import JobLease
from ..engine.host import WriterHost
from ..engine.merging import OPT_MERGE_OPERATOR
from ..engine.sstable import put_new_journal, put_new_sst
from ..errors import ClosedError, CorruptionError, InvalidArgument, ShaleError
from ..format import paths
from ..format.coding import CODECS
from ..format.journal import decode_pointer
from ..format.merge import decode_merge, encode_merge
from ..format.range_dels import KIND_RANGE_DEL
from ..format.row import (
    FLAG_INDEX_TREE,
    FLAG_INDEXED,
    KIND_MERGE,
    KIND_POINTER,
    KIND_TOMBSTONE,
    KIND_VALUE,
    TYPE_MASK,
    decode_payload,
)
from ..format.sst import (
    SST_JOURNAL,
    SST_TABLE,
    SstBuilder,
    decode_data_block,
    decode_meta,
    decode_sst,
)
from ..manifest.edits import Edit
from ..manifest.model import JournalFile, Manifest, SstInfo
from ..numbers import check_int
from .folds import last_of_batch
from .hosts import CompactionHost, EmbeddedHost, StandaloneHost
from .scoring import DROP, KEEP, TOMB, FileScore, _Ledger, best_run, block_head, plan_runs, score_file

log = logging.getLogger("shaledb.journal")


class _Restart(Exception):
    """The manifest changed under the job in a way that needs a rescan."""


class _Gone(Exception):
    """The run is no longer in the journal list (another compaction took it)."""


# ------------------------------------------------------------------ report


@dataclass
class JournalCompactionReport:
    """What :func:`compact_journal` scored and did."""

    manifest_id: int = 0
    strategy: str = "retain"
    busy: bool = False
    """Another journal compaction of this database was running in this process."""
    scores: list[FileScore] = field(default_factory=list, repr=False)
    """The first scoring pass (before anything was rewritten). Out of the repr, as are the
    lists below: one entry per journal file, a printed report filled a terminal (40 KB)."""
    runs: list[list[str]] = field(default_factory=list, repr=False)
    run_scores: list[float] = field(default_factory=list, repr=False)
    outputs: list[str] = field(default_factory=list, repr=False)
    bytes_read: int = 0
    """Bytes of the journal objects rewritten (and later reclaimed by GC)."""
    bytes_rewritten: int = 0
    """Bytes of the new journal objects."""
    bytes_kept: int = 0
    """Key and payload bytes of the entries kept (the rest of ``bytes_read`` was dead or overhead)."""
    entries_kept: int = 0
    entries_dropped: int = 0
    entries_converted: int = 0
    """Superseded or expired writes kept as key-change records (``retain``)."""
    damaged_blocks: int = 0
    ledger_ssts_rewritten: int = 0
    ledger_bytes_written: int = 0
    retries: int = 0
    duration_s: float = 0.0

    @property
    def bytes_reclaimed(self) -> int:
        return self.bytes_read - self.bytes_rewritten

    @property
    def did_work(self) -> bool:
        return bool(self.runs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "manifest_id": self.manifest_id,
            "strategy": self.strategy,
            "busy": self.busy,
            "scores": [
                {"id": s.id, "db": s.db, "size": s.size, "score": round(s.score, 2), "sampled": s.sampled}
                | ({"damaged": True} if s.damaged else {})
                for s in self.scores
            ],
            "runs": [list(r) for r in self.runs],
            "run_scores": [round(x, 2) for x in self.run_scores],
            "outputs": list(self.outputs),
            "bytes_read": self.bytes_read,
            "bytes_rewritten": self.bytes_rewritten,
            "bytes_kept": self.bytes_kept,
            "bytes_reclaimed": self.bytes_reclaimed,
            "entries_kept": self.entries_kept,
            "entries_dropped": self.entries_dropped,
            "entries_converted": self.entries_converted,
            "damaged_blocks": self.damaged_blocks,
            "ledger_ssts_rewritten": self.ledger_ssts_rewritten,
            "ledger_bytes_written": self.ledger_bytes_written,
            "retries": self.retries,
            "duration_s": round(self.duration_s, 3),
        }


# ----------------------------------------------------------------- rewrite


@dataclass
class _Rewrite:
    outputs: list[JournalFile] = field(default_factory=list)
    moves: dict[tuple[str, int, int], bytes] = field(default_factory=dict)
    """(old ref, block offset, index) -> the new pointer body."""
    bytes_read: int = 0
    bytes_written: int = 0
    kept: int = 0
    kept_bytes: int = 0
    dropped: int = 0
    converted: int = 0
    damaged: int = 0


class _Writer:
    """Builds the output journal objects of one run, cut at ``max_bytes``.

    Entries gather until a block's worth, then go to the builder whole
    batches at a time (a batch never spans blocks); an object is finished
    once it reaches ``max_bytes``, so it overshoots by at most one block.
    """

    def __init__(self, host: CompactionHost, res: _Rewrite, max_bytes: int) -> None:
        self.host = host
        self.res = res
        self.max_bytes = max_bytes
        self.block_size = host.settings.block_size_bytes
        self.builder: SstBuilder | None = None
        self.pending: list[tuple[tuple[str, int, int], int, int]] = []
        self.count = 0
        self._cols: tuple[list[bytes], list[int], list[int], list[bytes]] = ([], [], [], [])
        self._moves: list[tuple[tuple[str, int, int], int, int]] = []
        self._bytes = 0

    def add(
        self, keys: list[bytes], seqs: list[int], kinds: list[int], pays: list[bytes], moves: list[Any]
    ) -> None:
        """Entries of one source block (whole batches, in sequence order)."""
        ck, cs, ct, cp = self._cols
        mi = 0
        for i in range(len(keys)):
            if i and seqs[i] != seqs[i - 1] and self._bytes >= self.block_size:
                self._emit()
                ck, cs, ct, cp = self._cols
            while mi < len(moves) and moves[mi][1] == i:
                self._moves.append((moves[mi][0], len(ck), moves[mi][2]))
                mi += 1
            ck.append(keys[i])
            cs.append(seqs[i])
            ct.append(kinds[i])
            cp.append(pays[i])
            self._bytes += len(keys[i]) + len(pays[i])
        if self._bytes >= self.block_size:
            self._emit()

    def _emit(self) -> None:
        keys, seqs, kinds, pays = self._cols
        if not keys:
            return
        if self.builder is None:
            s = self.host.settings
            self.builder = SstBuilder(
                kind=SST_JOURNAL,
                block_size=self.block_size,
                codec=CODECS[s.compression],
                created_at_ms=int(self.host.clock.now() * 1000),
                nonce=self.host.rng.getrandbits(128).to_bytes(16, "little"),
            )
            self.count = 0
        for old, i, vlen in self._moves:
            self.pending.append((old, self.count + i, vlen))
        self.builder.add_many(keys, seqs, kinds, pays)
        self.count += len(keys)
        self._cols = ([], [], [], [])
        self._moves = []
        self._bytes = 0
        if self.builder.estimated_size >= self.max_bytes:
            self.finish()

    def finish(self) -> None:
        if self._cols[0]:
            self._emit()
        b = self.builder
        self.builder = None
        if b is None or not b.entries:
            return
        host = self.host
        record, ptrs = put_new_journal(
            host.store,
            b,
            lambda: paths.new_ulid(host.clock.now(), host.rng),
            [(g, vlen) for _, g, vlen in self.pending],
        )
        self.res.outputs.append(record)
        self.res.bytes_written += record.size
        for (old, _, _), ptr in zip(self.pending, ptrs):
            self.res.moves[old] = ptr
        self.pending = []


def rewrite_run(
    host: CompactionHost, ledger: _Ledger, run: Sequence[JournalFile], beat: Callable[[], None]
) -> _Rewrite:
    """Copy the kept entries of ``run`` into new journal objects (module docstring, step 3)."""

    res = _Rewrite()
    out = _Writer(host, res, host.settings.journal_max_bytes)
    for jf in run:
        host.check_open()
        path = paths.journal_object_path(jf.id)
        data = host.store_for(jf.db).get(path)
        res.bytes_read += len(data)
        try:
            meta = decode_meta(data, len(data))
        except CorruptionError as exc:
            raise exc.with_path(path) from exc
        offs = meta.index.offsets
        for bi in range(len(meta.index)):
            off, end = offs[bi], offs[bi + 1]
            try:
                b = decode_data_block(data[off:end])
            except CorruptionError as exc:
                res.damaged += 1
                log.warning("journal compaction drops damaged block %d of %s: %s", bi, path, exc)
                continue
            last = last_of_batch(b.keys, b.seqs)
            keys: list[bytes] = []
            seqs: list[int] = []
            kinds: list[int] = []
            pays: list[bytes] = []
            moves: list[tuple[tuple[str, int, int], int, int]] = []
            for i in range(len(b)):
                k, s, t = b.keys[i], b.seqs[i], b.kinds[i]
                p = b.payload(i)
                action = ledger.decide(k, s, t, p) if last[i] else DROP
                if t == KIND_RANGE_DEL:
                    action = KEEP  # a range delete stays as it is: a rebuild replays it
                if action == DROP:
                    res.dropped += 1
                    continue
                if action == TOMB:
                    t, p = KIND_TOMBSTONE | (t & FLAG_INDEXED), b""
                    res.converted += 1
                if not t & FLAG_INDEX_TREE and t & TYPE_MASK == KIND_VALUE:
                    try:
                        vlen = len(decode_payload(t, p)[0])
                    except CorruptionError:
                        res.dropped += 1
                        continue
                    moves.append(((jf.id, off, i), len(keys), vlen))
                keys.append(k)
                seqs.append(s)
                kinds.append(t)
                pays.append(p)
            res.kept += len(keys)
            res.kept_bytes += sum(map(len, keys)) + sum(map(len, pays))
            out.add(keys, seqs, kinds, pays, moves)
        beat()
    out.finish()
    return res


# ---------------------------------------------------------------- repoint


class _Repoint:
    """Ledger SSTs rewritten with moved pointers, kept up to date across retries."""

    def __init__(
        self, host: CompactionHost, runs: Sequence[Sequence[JournalFile]], moves: dict[Any, bytes]
    ) -> None:
        self.host = host
        self.refs = {j.id for run in runs for j in run}
        self.spans = [(min(j.min_seq for j in run), max(j.max_seq for j in run)) for run in runs]
        self.moves = moves
        self.scanned: set[str] = set()
        self.replaced: dict[str, SstInfo] = {}
        self.bytes_written = 0

    def overlaps(self, s: SstInfo, merges: bool = False) -> bool:
        """Whether ``s`` may point into the run. With merges, a merge entry newer than the
        run may carry a base pointing into it (compaction made it self-contained), so
        every SST not older than the run is scanned: the cost of merges over journal values."""
        if merges:
            return s.entries > 0 and any(s.max_seq >= lo for lo, _hi in self.spans)
        return s.entries > 0 and any(s.min_seq <= hi and s.max_seq >= lo for lo, hi in self.spans)

    def scan(self, m: Manifest) -> None:
        """Repoint every SST of ``m``'s data tree not yet scanned that may point into the run."""
        merges = m.option(OPT_MERGE_OPERATOR) is not None
        present = {s.id for s in m.data.ssts()}
        for old in [k for k in self.replaced if k not in present]:
            self._discard(self.replaced.pop(old))
        for s in m.data.ssts():
            if s.id in self.scanned or not self.overlaps(s, merges):
                continue
            self.host.check_open()
            new = self._rewrite(s)
            self.scanned.add(s.id)
            if new is not None:
                self.replaced[s.id] = new

    def _moved(self, kind: int, payload: bytes) -> bytes | None:
        """A POINTER entry's payload with its new pointer, or None if it does not move."""
        body = decode_payload(kind, payload)[0]
        ptr = decode_pointer(body)
        if ptr.ref not in self.refs:
            return None
        new = self.moves.get((ptr.ref, ptr.block_off, ptr.index))
        if new is None:
            return None
        return payload[: len(payload) - len(body)] + new

    def _moved_base(self, payload: bytes) -> bytes | None:
        """A merge entry's payload with its base's pointer moved, or None."""
        base, ops = decode_merge(payload)
        if base is None or base[0] & TYPE_MASK != KIND_POINTER:
            return None
        moved = self._moved(base[0], base[1])
        return None if moved is None else encode_merge(ops, (base[0], moved))

    def _rewrite(self, s: SstInfo) -> SstInfo | None:
        path = paths.sst_path(s.id)
        data = self.host.store_for(s.db).get(path)
        try:
            _meta, blocks = decode_sst(data)
        except CorruptionError as exc:
            raise exc.with_path(path) from exc
        keys: list[bytes] = []
        seqs: list[int] = []
        kinds: list[int] = []
        pays: list[bytes] = []
        changed = 0
        for b in blocks:
            bp = list(b.payloads(0, len(b)))
            keys += b.keys
            seqs += b.seqs.tolist()
            kb = list(b.kinds)
            for i, t in enumerate(kb):
                if t == KIND_MERGE:  # a merge over a journal value: its base points here
                    moved = self._moved_base(bp[i])
                    if moved is not None:
                        bp[i] = moved
                        changed += 1
                    continue
                if t & TYPE_MASK != KIND_POINTER:
                    continue
                p = bp[i]
                moved = self._moved(t, p)
                if moved is None:
                    continue  # not in the run, or a superseded version never read through this manifest
                bp[i] = moved
                changed += 1
            kinds += kb
            pays += bp
        if not changed:
            return None
        st = self.host.settings
        builder = SstBuilder(
            kind=SST_TABLE,
            block_size=st.block_size_bytes,
            codec=CODECS[st.compression],
            bloom_bits_per_key=st.bloom_bits_per_key,
            created_at_ms=int(self.host.clock.now() * 1000),
            nonce=self.host.rng.getrandbits(128).to_bytes(16, "little"),
        )
        builder.add_many(keys, seqs, kinds, pays)
        out, props = builder.finish_buffer()
        info = put_new_sst(
            self.host.store, out, props, lambda: paths.new_ulid(self.host.clock.now(), self.host.rng)
        )
        self.bytes_written += len(out)
        return info

    def _discard(self, s: SstInfo) -> None:
        try:
            self.host.store.delete(paths.sst_path(s.id))
        except ShaleError as exc:
            log.warning("could not delete unused repointed SST %s: %s", s.id, exc)

    def discard_all(self) -> None:
        for s in self.replaced.values():
            self._discard(s)
        self.replaced = {}

    def apply(
        self, cur: Manifest, runs: Sequence[Sequence[JournalFile]], outputs: Sequence[Sequence[JournalFile]]
    ) -> Manifest:
        """``cur`` with the runs replaced and the SSTs repointed; raises if it must rescan."""
        ids = [j.id for j in cur.journal]
        at = {j: i for i, j in enumerate(ids)}
        starts: dict[int, tuple[int, Sequence[JournalFile]]] = {}
        for run, out in zip(runs, outputs):
            run_ids = [j.id for j in run]
            p = at.get(run_ids[0])
            if p is None or ids[p : p + len(run_ids)] != run_ids:
                raise _Gone()
            starts[p] = (len(run_ids), out)
        present = {s.id for s in cur.data.ssts()}
        if any(old not in present for old in self.replaced):
            raise _Restart("a repointed SST was replaced meanwhile")
        merges = cur.option(OPT_MERGE_OPERATOR) is not None
        for s in cur.data.ssts():
            if s.id not in self.scanned and self.overlaps(s, merges):
                raise _Restart(f"SST {s.id} appeared meanwhile and may point into the run")
        rep = self.replaced
        data = cur.data.map_ssts(lambda s: rep.get(s.id, s))
        journal: list[JournalFile] = []
        i = 0
        while i < len(cur.journal):
            if i in starts:
                n, out = starts[i]
                journal.extend(out)
                i += n
            else:
                journal.append(cur.journal[i])
                i += 1
        return replace(cur, data=data, journal=tuple(journal))


# -------------------------------------------------------------- the driver


@dataclass(frozen=True)
class RepointJournal(Edit):
    """Commit rewritten journal runs: ``runs`` replaced by ``outputs`` and the index SSTs
    repointed (``_Repoint.apply``), while the compaction ``lease``'s epoch is still current
    (``_Gone`` otherwise) and the host still open. ``seen`` receives every attempt's
    manifest (a ``_Restart`` rescans from the last one)."""

    host: CompactionHost
    lease: Any
    rp: _Repoint
    runs: list[list[JournalFile]]
    outputs: list[list[JournalFile]]
    seen: list[Manifest] = field(default_factory=list)

    def apply(self, m: Manifest) -> Manifest | None:
        self.host.check_open()
        self.seen.append(m)
        if m.compactor_epoch != self.lease.epoch:
            raise _Gone()
        return self.rp.apply(m, self.runs, self.outputs)


def compact_journal(
    host: CompactionHost,
    *,
    max_runs: int | None = None,
    objects: Sequence[str] | None = None,
    lease_s: float = 600.0,
) -> JournalCompactionReport:
    """Score the journal and compact runs until none is worth it (module docstring).

    Each pass picks every run worth compacting given the scores (best first,
    runs never overlap), rewrites them, repoints the ledger once and commits
    once; passes repeat until one finds nothing (or ``max_runs`` runs are done).
    """
    if max_runs is not None:
        check_int("max_runs", max_runs, minimum=0)
    report = JournalCompactionReport()
    if not host.lock.acquire(blocking=False):
        report.busy = True
        return report
    started = host.clock.monotonic()
    try:
        opts = host.settings.journal
        scores: dict[str, FileScore] = {}
        forced = list(objects) if objects is not None else None
        gone = 0
        while max_runs is None or len(report.runs) < max_runs:
            host.check_open()
            m = host.latest()
            report.manifest_id = m.id
            strategy = m.option("journal_recovery") or "retain"
            report.strategy = strategy
            files = list(m.journal)
            if not files:
                break
            ledger = _Ledger(host, m, strategy)
            if forced is not None:
                ids = [j.id for j in files]
                if not forced or forced[0] not in ids:
                    break
                p = ids.index(forced[0])
                if ids[p : p + len(forced)] != forced:
                    raise InvalidArgument("objects must be consecutive journal files of the latest manifest")
                picks = [(p, len(forced), 0.0)]
            else:
                for jf in files:
                    if jf.id not in scores:
                        scores[jf.id] = score_file(host, ledger, jf, opts.sample_entries)
                if not report.scores:
                    report.scores = [scores[j.id] for j in files]
                left = None if max_runs is None else max_runs - len(report.runs)
                picks = plan_runs([scores[j.id].score for j in files], opts, left)
            if not picks:
                break
            runs = [files[a : a + n] for a, n, _ in picks]
            with JobLease(
                host.store,
                host.clock,
                random.Random(host.rng.getrandbits(64)),
                m.compactor_epoch,
                lease_s,
                f"journal compaction of {sum(map(len, runs))} objects",
            ) as lease:
                done = _compact_runs(host, ledger, m, runs, lease, report)
            for run in runs:
                for jf in run:
                    scores.pop(jf.id, None)
            if done is None:
                gone += 1
                if gone > 3:
                    break  # others keep compacting the same objects: leave it to them
                continue  # a run went away under us: score again
            for out in done:
                for o in out:
                    scores[o.id] = FileScore(o.id, 0, o.size, 100.0, 0)
            for run, (_a, _n, rs) in zip(runs, picks):
                report.runs.append([j.id for j in run])
                report.run_scores.append(rs)
            if forced is not None:
                break
    finally:
        host.lock.release()
        report.duration_s = host.clock.monotonic() - started
    if report.runs:
        log.info(
            "journal compaction: %d runs, %d bytes rewritten into %d bytes (%d reclaimed), %d ledger SSTs",
            len(report.runs),
            report.bytes_read,
            report.bytes_rewritten,
            report.bytes_reclaimed,
            report.ledger_ssts_rewritten,
        )
    return report


def _compact_runs(
    host: CompactionHost,
    ledger: _Ledger,
    m: Manifest,
    runs: list[list[JournalFile]],
    lease: Any,
    report: JournalCompactionReport,
) -> list[list[JournalFile]] | None:
    results = []
    moves: dict[tuple[str, int, int], bytes] = {}
    try:
        for run in runs:
            res = rewrite_run(host, ledger, run, lease.beat)
            results.append(res)
            moves.update(res.moves)
    except BaseException:
        for res in results:
            _delete_outputs(host, res.outputs)
        raise
    outputs = [res.outputs for res in results]
    rp = _Repoint(host, runs, moves)
    edit = RepointJournal(host, lease, rp, runs, outputs)
    seen = edit.seen

    try:
        rp.scan(m)
        for _ in range(50):
            try:
                host.update(edit)
                break
            except _Restart as exc:
                report.retries += 1
                log.info("journal compaction: rescanning (%s)", exc)
                rp.scan(seen[-1])
                lease.beat()
        else:
            raise _Gone()
    except _Gone:
        report.retries += 1
        _abandon(host, rp, outputs)
        return None
    except BaseException:
        _abandon(host, rp, outputs)
        raise
    for res in results:
        report.outputs.extend(o.id for o in res.outputs)
        report.bytes_read += res.bytes_read
        report.bytes_rewritten += res.bytes_written
        report.bytes_kept += res.kept_bytes
        report.entries_kept += res.kept
        report.entries_dropped += res.dropped
        report.entries_converted += res.converted
        report.damaged_blocks += res.damaged
    report.ledger_ssts_rewritten += len(rp.replaced)
    report.ledger_bytes_written += rp.bytes_written
    return outputs


def _abandon(host: CompactionHost, rp: _Repoint, outputs: list[list[JournalFile]]) -> None:
    """Delete a failed commit's outputs, unless the commit may have landed after all.

    A manifest update can fail after its create landed (the listing that follows it, a
    timeout), and a retried mutation can give up after an earlier attempt landed. Deleting
    then would leave the live manifest naming deleted objects, so the outputs are deleted
    only when the latest manifest names none of them; when it cannot be read, nothing is
    deleted and the garbage collector takes what no manifest references.
    """
    try:
        cur = host.latest()
    except ShaleError as exc:
        log.warning("journal compaction: outputs left to GC (manifest unreadable: %s)", exc)
        return
    live_journal = {j.id for j in cur.journal}
    live_ssts = {s.id for s in cur.data.ssts()}
    ours = {o.id for out in outputs for o in out}
    if ours & live_journal or any(s.id in live_ssts for s in rp.replaced.values()):
        log.warning("journal compaction: the commit landed although the update failed; outputs kept")
        rp.replaced = {}
        return
    rp.discard_all()
    for out in outputs:
        _delete_outputs(host, out)


def _delete_outputs(host: CompactionHost, outputs: list[JournalFile]) -> None:
    try:
        host.store.delete_many([paths.journal_path(o.id) for o in outputs])
    except ShaleError as exc:
        log.warning("could not delete %d unused journal objects: %s", len(outputs), exc)


class EmbeddedJournalCompactor:
    """Journal compaction as a thread of the writer (``JournalOptions.compaction_interval_s``).

    Failures are logged and retried at the next interval; they never stop the writer.
    """

    def __init__(self, db: WriterHost, interval_s: float) -> None:
        self.db = db
        self.interval_s = interval_s
        self.last_report: JournalCompactionReport | None = None
        self.last_error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="shaledb-journal", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self.db.clock.wait(self._stop, self.interval_s):
            try:
                self.last_report = compact_journal(EmbeddedHost(self.db))
            except ClosedError:
                return
            except Exception as exc:  # noqa: BLE001 - logged and retried; the writer keeps going
                self.last_error = exc
                log.error("embedded journal compaction failed (retrying): %s", exc)

    def wake(self) -> None:
        """Runs on its interval."""

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


__all__ = [
    "EmbeddedJournalCompactor",
    "FileScore",
    "JournalCompactionReport",
    "EmbeddedHost",
    "StandaloneHost",
    "best_run",
    "block_head",
    "compact_journal",
    "score_file",
]
