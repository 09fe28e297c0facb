"""Rebuilding the ledger from the value journal (Leveled's reload from the Journal).

The journal files of the current manifest hold, in sequence order, every
write that reached L0 -- data entries (values inline, whatever their size)
and index-tree entries -- minus what journal compaction dropped. Replaying
them newest-wins gives back both trees:

* under ``retain`` compaction kept every tombstone and every index-tree entry
  (the key changes of superseded writes), so the rebuilt data tree holds the
  current version of every key and the index tree exactly the current terms:
  the rebuild is exact;
* under ``recovr`` those were dropped once superseded: a key deleted after
  its tombstone was reaped comes back if an older journal object still holds
  one of its values, and an index term removed the same way comes back
  (Leveled's documented loss: values stay right for keys still live, index
  history does not).

Values at or above the separation threshold become pointers into the
journal objects they are read from; smaller ones stay inline. The rebuilt
trees are each one sorted run (tombstones and expired entries dropped: there
is nothing under them) and replace the ledger in one manifest CAS that keeps
L0 SSTs flushed meanwhile (their writes are newer than the journal). Writes
still in the WAL replay range are untouched (they are in the writer's
memtable and reach L0 as usual).

A journal that does not hold every write since the database was created
(``journal.complete`` is not "1": the threshold was set later, or journaling
was switched off for a while) cannot rebuild an exact ledger; the rebuild then
refuses unless forced. Bulk-ingested rows are written as SSTs, not to the
journal, so a rebuild drops them (also refused unless forced when the
manifest records ingests).

The whole journal is read once and every key is held in memory while the
runs are written: a tool for disaster recovery of databases that fit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ..compaction.compactor import JobLease
from ..engine.host import WriterHost
from ..engine.merging import stack
from ..engine.sstable import put_new_sst
from ..errors import CorruptionError, InvalidArgument, InvalidDbState
from ..format import paths
from ..format.coding import CODECS
from ..format.journal import decode_index_key, encode_pointer, ranged_pointer
from ..format.merge import decode_merge
from ..format.range_dels import KIND_RANGE_DEL, Fragments
from ..format.row import (
    EXTRA_FLAGS,
    FLAG_INDEX_TREE,
    KIND_MERGE,
    KIND_POINTER,
    KIND_TOMBSTONE,
    KIND_VALUE,
    TYPE_MASK,
    decode_payload,
    payload_expiry,
)
from ..format.sst import SST_TABLE, SstBuilder
from ..manifest.edits import Edit
from ..manifest.model import Manifest, SortedRun, SstInfo, Tree
from ..manifest.options import OPT_COMPLETE
from .folds import journal_blocks

Entry = tuple[int, int, bytes]


def replay_journal(db: WriterHost, m: Manifest) -> tuple[dict[bytes, Entry], dict[bytes, Entry], int, int]:
    """Newest entry per key of each tree, from the journal files of ``m``; and
    how many objects and entries were read."""
    thr = db.settings.value_separation_threshold
    data: dict[bytes, Entry] = {}
    index: dict[bytes, Entry] = {}
    entries = 0
    rdels: list[tuple[bytes, bytes, int]] = []
    for jf in m.journal:
        path = paths.journal_object_path(jf.id)
        raw = db.store_for(jf.db).get(path)
        for off, length, b in journal_blocks(raw, path):
            for i in range(len(b)):
                entries += 1
                k, s, t = b.keys[i], b.seqs[i], b.kinds[i]
                p = b.payload(i)
                if t & FLAG_INDEX_TREE:
                    old = index.get(k)
                    if old is None or old[0] <= s:
                        index[k] = (s, t & ~FLAG_INDEX_TREE, p)
                    continue
                if t == KIND_RANGE_DEL:
                    rdels.append((k, p, s))
                    continue
                old = data.get(k)
                if old is not None and old[0] > s:
                    continue
                if t == KIND_MERGE:  # stacks onto what the key had (shaledb.engine.merging)
                    data[k] = stack(_merge_base(old, k, s, rdels), s, decode_merge(p)[1])
                    continue
                if thr is not None and t & TYPE_MASK == KIND_VALUE and len(p) >= thr:
                    try:
                        body = decode_payload(t, p)[0] if t & EXTRA_FLAGS else p
                    except CorruptionError as exc:
                        raise exc.with_path(path) from exc
                    if len(body) >= thr:
                        ptr = encode_pointer(ranged_pointer(jf.id, raw, off, length, i, len(body)))
                        t = (t & ~TYPE_MASK) | KIND_POINTER
                        p = p[: len(p) - len(body)] + ptr
                data[k] = (s, t, p)
    if rdels:  # range deletes: the keys they cover, written before them, are gone
        # (a merge after a range delete of its key stacked onto a tombstone: _merge_base)
        frags = Fragments.build(rdels)
        for k in [k for k, e in data.items() if frags.covering(k) > e[0]]:
            del data[k]
        for ik in [ik for ik, e in index.items() if frags.covering(decode_index_key(ik)[2]) > e[0]]:
            del index[ik]
    return data, index, len(m.journal), entries


def _merge_base(
    old: Entry | None, key: bytes, seq: int, rdels: list[tuple[bytes, bytes, int]]
) -> Entry | None:
    """What a merge at ``seq`` stacks onto: the key's entry so far, or a tombstone when a
    range delete replayed between them covers the key (it folds onto nothing then)."""
    floor = old[0] if old is not None else -1
    top = max((q for a, b, q in rdels if a <= key < b and floor < q < seq), default=None)
    if top is not None:
        return (top, KIND_TOMBSTONE, b"")
    return old


def _write_run(
    db: WriterHost, entries: dict[bytes, Entry], now_ms: int, beat: Callable[[], None]
) -> list[SstInfo]:
    s = db.settings
    max_bytes = s.compactor.max_sst_size_bytes if s.compactor is not None else 64 * 1024 * 1024
    out: list[SstInfo] = []
    builder: SstBuilder | None = None

    def finish() -> None:
        nonlocal builder
        if builder is None or not builder.entries:
            builder = None
            return
        data, props = builder.finish_buffer()
        builder = None
        out.append(put_new_sst(db.store, data, props, lambda: paths.new_ulid(db.clock.now(), db.rng)))
        beat()

    for k in sorted(entries):
        seq, kind, payload = entries[k]
        if kind & TYPE_MASK == KIND_TOMBSTONE:
            continue
        expires = payload_expiry(kind, payload)
        if expires is not None and expires <= now_ms:
            continue
        if builder is None:
            builder = SstBuilder(
                kind=SST_TABLE,
                block_size=s.block_size_bytes,
                codec=CODECS[s.compression],
                bloom_bits_per_key=s.bloom_bits_per_key,
                created_at_ms=now_ms,
                nonce=db.rng.getrandbits(128).to_bytes(16, "little"),
            )
        builder.add(k, seq, kind, payload)
        if builder.estimated_size >= max_bytes:
            finish()
    finish()
    return out


def rebuild_ledger(db: WriterHost, *, force: bool = False) -> dict[str, Any]:
    """Replace the ledger of ``db`` with one rebuilt from its journal (module docstring)."""
    db.check_failure()
    m = db.refresh_manifest()
    if not m.journal:
        if m.last_l0_seq == 0 and not any(True for _ in m.all_ssts()):
            return {"manifest_id": m.id, "journal_objects": 0, "entries_read": 0, "data_keys": 0}
        raise InvalidArgument("this database has no value journal to rebuild the ledger from")
    if not force:
        if m.option(OPT_COMPLETE) != "1":
            raise InvalidDbState(
                "the value journal does not hold every write of this database (it was not journaled "
                "from the start), so a rebuilt ledger would lose data; use force=True (--force) to "
                "rebuild anyway"
            )
        if m.ingests:
            raise InvalidDbState(
                "this database has bulk-ingested rows, which are not in the value journal; "
                "use force=True (--force) to rebuild without them"
            )
    for _ in range(10):
        done = _attempt(db, m)
        if isinstance(done, dict):
            return done
        m = done
    raise InvalidDbState("the ledger kept changing under the rebuild; stop the compactor and retry")


REBUILD_LEASE_EPOCH = 2**63 - 1
"""The rebuild's lease names the largest epoch, as a bulk ingest's does: no compactor opening
meanwhile makes it stale (it lapses only unrenewed, after :data:`REBUILD_LEASE_S`)."""

REBUILD_LEASE_S = 600.0


class _Moved(Exception):
    pass


@dataclass(frozen=True)
class InstallRebuild(Edit):
    """Replace both trees' runs with the rebuilt SSTs, keeping L0 SSTs newer than the
    rebuild's ``last_l0_seq``; ``_Moved`` (start over) if a compaction merged newer writes.
    ``seen`` receives the manifest of every attempt (to start over from the last one)."""

    last_l0_seq: int
    data_ssts: list[SstInfo]
    index_ssts: list[SstInfo]
    decorate: Callable[[Manifest], Manifest]
    seen: list[Manifest] = field(default_factory=list)

    def apply(self, m: Manifest) -> Manifest | None:
        self.seen.append(m)
        trees = []
        for name, ssts in (("data", self.data_ssts), ("index", self.index_ssts)):
            t = m.tree(name)
            newer = tuple(s for s in t.l0 if s.min_seq > self.last_l0_seq)
            for s in t.ssts():
                if s.max_seq > self.last_l0_seq and s not in newer:
                    raise _Moved()  # a compaction merged newer writes: start over
            trees.append((newer, ssts))
        rid = m.next_run_id
        data_t = Tree(trees[0][0], (SortedRun(rid, tuple(trees[0][1])),) if trees[0][1] else ())
        index_t = Tree(trees[1][0], (SortedRun(rid + 1, tuple(trees[1][1])),) if trees[1][1] else ())
        return self.decorate(replace(m, data=data_t, index=index_t, next_run_id=rid + 2))


def _attempt(db: WriterHost, m: Manifest) -> dict[str, Any] | Manifest:
    """One rebuild against ``m``: the report, or the manifest to start over from.

    The runs are written and committed under a job lease, like every job whose outputs wait
    for one commit: they are in no manifest until it lands and their writes are old
    (``max_seq`` at or below ``last_l0_seq``), so without one a collector at a low
    ``min_age_s`` deleted them and the commit named missing SSTs."""
    now_ms = int(db.clock.now() * 1000)
    data, index, objects, read = replay_journal(db, m)
    with JobLease(
        db.store, db.clock, db.rng, REBUILD_LEASE_EPOCH, REBUILD_LEASE_S, "rebuild-ledger"
    ) as lease:
        data_ssts = _write_run(db, data, now_ms, lease.beat)
        index_ssts = _write_run(db, index, now_ms, lease.beat)
        edit = InstallRebuild(m.last_l0_seq, data_ssts, index_ssts, db.decorate_manifest)
        seen = edit.seen
        try:
            after = db.update_manifest(edit)
        except _Moved:
            db.store.delete_many([paths.sst_path(s.id) for s in (*data_ssts, *index_ssts)])
            return seen[-1] if seen else db.refresh_manifest()
    return {
        "manifest_id": after.id,
        "journal_objects": objects,
        "entries_read": read,
        "data_keys": sum(s.entries for s in data_ssts),
        "index_entries": sum(s.entries for s in index_ssts),
        "ssts_written": len(data_ssts) + len(index_ssts),
        "bytes_written": sum(s.size for s in (*data_ssts, *index_ssts)),
    }


__all__ = ["rebuild_ledger", "replay_journal"]
