"""The manifest: an immutable description of one version of a database.

A manifest names every SST that makes up the LSM tree, the WAL range still to
replay, the epochs that fence old writers and compactors, the checkpoints that
pin older versions, the WAL objects it tracks, and clone/journal state. Each
update writes a whole new manifest (``manifest/<id+1>.manifest``) with
create-if-absent, so the values here are never mutated: ``dataclasses.replace``
makes the next version.

``to_body``/``from_body`` convert to and from the JSON body that
``shaledb.format.manifest`` frames; ``from_body`` validates every field because
manifest bytes are untrusted (a damaged or hostile manifest must raise
``CorruptionError``, never produce a path outside the database).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import CorruptionError
from ..format.paths import check_journal_ref, check_ulid

TREE_NAMES = ("data", "index")

MAX_TIME_S = 253402300799.0
"""Latest time a manifest may record (9999-12-31T23:59:59Z, the last a ``datetime`` holds):
a later one is damage, and a listing that printed it (``datetime.fromtimestamp``) failed."""


@dataclass(frozen=True, slots=True)
class SstInfo:
    """One SST of the tree. ``db`` 0 is this database; ``i > 0`` is
    ``Manifest.external_dbs[i - 1]`` (a clone parent that owns the object)."""

    id: str
    size: int
    first_key: bytes
    last_key: bytes
    entries: int
    min_seq: int
    max_seq: int
    db: int = 0
    range_dels: int = 0
    """Range tombstones (fragment-seq pairs) in the SST's range-del block: reads open
    only the SSTs that have some to learn them (docs/format/range-dels.md)."""


@dataclass(frozen=True, slots=True)
class SortedRun:
    """SSTs with disjoint key ranges, in key order."""

    id: int
    ssts: tuple[SstInfo, ...]

    @property
    def size(self) -> int:
        return sum(s.size for s in self.ssts)

    @property
    def entries(self) -> int:
        return sum(s.entries for s in self.ssts)


@dataclass(frozen=True, slots=True)
class Tree:
    """An LSM tree: L0 SSTs (newest first, overlapping) and sorted runs (newest first)."""

    l0: tuple[SstInfo, ...] = ()
    runs: tuple[SortedRun, ...] = ()

    def ssts(self) -> Iterator[SstInfo]:
        yield from self.l0
        for run in self.runs:
            yield from run.ssts

    @property
    def size(self) -> int:
        return sum(s.size for s in self.ssts())

    def map_ssts(self, f: Callable[[SstInfo], SstInfo]) -> Tree:
        """The same shape with every SST replaced by ``f(sst)``."""
        return Tree(tuple(map(f, self.l0)), tuple(SortedRun(r.id, tuple(map(f, r.ssts))) for r in self.runs))


@dataclass(frozen=True, slots=True)
class TrackedWal:
    """A closed WAL object recorded with its size and CRC32C (see docs/design/wal.md)."""

    id: int
    size: int
    crc32c: int


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A pin on manifest ``manifest_id``: GC keeps everything it references.

    ``expire_time_s`` None never expires. ``writer_epoch`` marks the writer's
    own checkpoint (a writer checkpoint, see docs/design/checkpoints-readers-clones.md).
    """

    id: uuid.UUID
    manifest_id: int
    create_time_s: float
    expire_time_s: float | None = None
    name: str | None = None
    writer_epoch: int | None = None
    metadata: tuple[tuple[str, str], ...] = ()

    def expired(self, now_s: float) -> bool:
        return self.expire_time_s is not None and self.expire_time_s <= now_s


@dataclass(frozen=True, slots=True)
class ExternalDb:
    """Another database whose SSTs this one references (a clone parent)."""

    url: str
    checkpoint_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class ParentRef:
    """The database and checkpoint a clone was forked from."""

    url: str
    checkpoint_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class JournalFile:
    """A value-journal object (key/value separation).

    ``id`` is a WAL id as 20 digits (the WAL object ``wal/<id>.sst``, kept as a
    journal file once its writes reached L0) or a ULID
    (``journal/<ULID>.journal``, written by journal compaction). ``db`` as
    for :class:`SstInfo`. The manifest lists them in sequence order.
    """

    id: str
    size: int
    entries: int
    min_seq: int
    max_seq: int
    db: int = 0


@dataclass(frozen=True, slots=True)
class IngestRecord:
    """A committed bulk ingest (``shaledb.bulk.ingest``): its id makes a re-run a no-op.

    ``fingerprint`` summarises the rows (see ``shaledb.bulk.ingest``) so a re-run
    under the same id with other data is refused instead of ignored.
    """

    id: str
    manifest_id: int
    time_s: float
    rows: int
    seq: int
    fingerprint: str = ""


@dataclass(frozen=True, slots=True)
class Manifest:
    """One version of the database (see module docstring)."""

    id: int
    writer_epoch: int = 0
    compactor_epoch: int = 0
    initialized: bool = True
    destroyed_at_s: float | None = None
    next_wal_id: int = 1
    """The lowest WAL id not known to be used (``wal_id_last_seen + 1``)."""
    replay_after_wal_id: int = 0
    """Every WAL object with an id <= this is fully contained in SSTs."""
    last_l0_seq: int = 0
    """The highest sequence number contained in SSTs."""
    data: Tree = field(default_factory=Tree)
    index: Tree = field(default_factory=Tree)
    next_run_id: int = 1
    tracked_wals: tuple[TrackedWal, ...] = ()
    checkpoints: tuple[Checkpoint, ...] = ()
    parent: ParentRef | None = None
    external_dbs: tuple[ExternalDb, ...] = ()
    journal: tuple[JournalFile, ...] = ()
    options: tuple[tuple[str, str], ...] = ()
    """Database-wide persisted options (e.g. the journal recovery strategy)."""
    ingests: tuple[IngestRecord, ...] = ()
    """The most recent bulk ingests, oldest first (bounded; see ``shaledb.bulk.ingest``)."""
    extra: tuple[tuple[str, Any], ...] = ()
    """Body fields this version does not know, kept so they round-trip."""

    def tree(self, name: str) -> Tree:
        if name == "data":
            return self.data
        if name == "index":
            return self.index
        raise KeyError(name)

    def with_tree(self, name: str, tree: Tree) -> Manifest:
        if name == "data":
            return replace(self, data=tree)
        if name == "index":
            return replace(self, index=tree)
        raise KeyError(name)

    def all_ssts(self) -> Iterator[SstInfo]:
        yield from self.data.ssts()
        yield from self.index.ssts()

    def checkpoint(self, checkpoint_id: uuid.UUID) -> Checkpoint | None:
        for cp in self.checkpoints:
            if cp.id == checkpoint_id:
                return cp
        return None

    def option(self, name: str, default: str | None = None) -> str | None:
        for k, v in self.options:
            if k == name:
                return v
        return default


# ----------------------------------------------------------------- JSON body


def _sst_to(s: SstInfo) -> dict[str, Any]:
    d: dict[str, Any] = {
        "id": s.id,
        "size": s.size,
        "first_key": s.first_key.hex(),
        "last_key": s.last_key.hex(),
        "entries": s.entries,
        "min_seq": s.min_seq,
        "max_seq": s.max_seq,
    }
    if s.db:
        d["db"] = s.db
    if s.range_dels:
        d["range_dels"] = s.range_dels
    return d


def _tree_to(t: Tree) -> dict[str, Any]:
    return {
        "l0": [_sst_to(s) for s in t.l0],
        "runs": [{"id": r.id, "ssts": [_sst_to(s) for s in r.ssts]} for r in t.runs],
    }


def _cp_to(c: Checkpoint) -> dict[str, Any]:
    d: dict[str, Any] = {"id": str(c.id), "manifest_id": c.manifest_id, "create_time_s": c.create_time_s}
    if c.expire_time_s is not None:
        d["expire_time_s"] = c.expire_time_s
    if c.name is not None:
        d["name"] = c.name
    if c.writer_epoch is not None:
        d["writer_epoch"] = c.writer_epoch
    if c.metadata:
        d["metadata"] = dict(c.metadata)
    return d


_KNOWN = {
    "id",
    "writer_epoch",
    "compactor_epoch",
    "initialized",
    "destroyed_at_s",
    "next_wal_id",
    "replay_after_wal_id",
    "last_l0_seq",
    "trees",
    "next_run_id",
    "tracked_wals",
    "checkpoints",
    "parent",
    "external_dbs",
    "journal",
    "options",
    "ingests",
    "nonce",
    "prev_nonce",
    "author",
}


def to_body(m: Manifest, *, nonce: str, author: str) -> dict[str, Any]:
    """The JSON body for ``m``; ``nonce`` makes every written version unique."""
    body: dict[str, Any] = dict(m.extra)
    body.update(
        {
            "id": m.id,
            "writer_epoch": m.writer_epoch,
            "compactor_epoch": m.compactor_epoch,
            "initialized": m.initialized,
            "next_wal_id": m.next_wal_id,
            "replay_after_wal_id": m.replay_after_wal_id,
            "last_l0_seq": m.last_l0_seq,
            "trees": {"data": _tree_to(m.data), "index": _tree_to(m.index)},
            "next_run_id": m.next_run_id,
            "tracked_wals": [[w.id, w.size, w.crc32c] for w in m.tracked_wals],
            "checkpoints": [_cp_to(c) for c in m.checkpoints],
            "external_dbs": [{"url": e.url, "checkpoint_id": str(e.checkpoint_id)} for e in m.external_dbs],
            "journal": [
                {"id": j.id, "size": j.size, "entries": j.entries, "min_seq": j.min_seq, "max_seq": j.max_seq}
                | ({"db": j.db} if j.db else {})
                for j in m.journal
            ],
            "options": dict(m.options),
            "nonce": nonce,
            "author": author,
        }
    )
    if m.destroyed_at_s is not None:
        body["destroyed_at_s"] = m.destroyed_at_s
    if m.parent is not None:
        body["parent"] = {"url": m.parent.url, "checkpoint_id": str(m.parent.checkpoint_id)}
    if m.ingests:  # written only when present, so older manifests keep their exact bytes
        body["ingests"] = [
            {"id": g.id, "manifest_id": g.manifest_id, "time_s": g.time_s, "rows": g.rows, "seq": g.seq}
            | ({"fingerprint": g.fingerprint} if g.fingerprint else {})
            for g in m.ingests
        ]
    return body


class _Reader:
    """Typed accessors that turn any schema violation into CorruptionError."""

    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, msg: str) -> CorruptionError:
        return CorruptionError(f"manifest {self.where}: {msg}")

    def int_(self, d: Mapping[str, Any], key: str, default: int | None = None, minimum: int = 0) -> int:
        v = d.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum or v > 2**64 - 1:
            raise self.fail(f"field {key!r} must be an integer >= {minimum}, got {v!r}")
        return v

    def num(self, d: Mapping[str, Any], key: str) -> float:
        """A time in seconds since the epoch (every float field of the body is one):
        finite, >= 0 and at most :data:`MAX_TIME_S`."""
        v = d.get(key)
        try:
            f = math.nan if isinstance(v, bool) or not isinstance(v, (int, float)) else float(v)
        except OverflowError:  # an integer beyond float range (JSON integers have any length)
            f = math.nan
        if not math.isfinite(f) or f < 0 or f > MAX_TIME_S:  # Infinity is not JSON, and not a time
            raise self.fail(
                f"field {key!r} must be a time: a finite number of seconds from 0 to {MAX_TIME_S:.0f} "
                f"(year 9999), got {v!r}"
            )
        return f

    def opt_num(self, d: Mapping[str, Any], key: str) -> float | None:
        return None if d.get(key) is None else self.num(d, key)

    def str_(self, d: Mapping[str, Any], key: str, max_len: int = 4096) -> str:
        v = d.get(key)
        if not isinstance(v, str) or len(v) > max_len:
            raise self.fail(f"field {key!r} must be a string")
        return v

    def hexbytes(self, d: Mapping[str, Any], key: str) -> bytes:
        v = self.str_(d, key, max_len=1 << 20)
        try:
            return bytes.fromhex(v)
        except ValueError as exc:
            raise self.fail(f"field {key!r} is not hex") from exc

    def list_(self, d: Mapping[str, Any], key: str) -> list[Any]:
        v = d.get(key, [])
        if not isinstance(v, list):
            raise self.fail(f"field {key!r} must be a list")
        return v

    def dict_(self, v: Any, what: str) -> Mapping[str, Any]:
        if not isinstance(v, dict):
            raise self.fail(f"{what} must be an object")
        return v

    def uuid_(self, d: Mapping[str, Any], key: str) -> uuid.UUID:
        try:
            return uuid.UUID(self.str_(d, key, 64))
        except ValueError as exc:
            raise self.fail(f"field {key!r} is not a UUID") from exc

    def journal_ref(self, d: Mapping[str, Any], key: str) -> str:
        v = self.str_(d, key, 64)
        try:
            return check_journal_ref(v)
        except Exception as exc:
            raise self.fail(f"field {key!r} is not a valid journal object id") from exc

    def ulid(self, d: Mapping[str, Any], key: str) -> str:
        v = self.str_(d, key, 64)
        try:
            return check_ulid(v)
        except Exception as exc:
            raise self.fail(f"field {key!r} is not a valid object id") from exc


def _sst_from(r: _Reader, raw: Any, n_external: int) -> SstInfo:
    d = r.dict_(raw, "SST entry")
    db = r.int_(d, "db", 0)
    if db > n_external:
        raise r.fail(f"SST refers to external database {db}, only {n_external} known")
    return SstInfo(
        id=r.ulid(d, "id"),
        size=r.int_(d, "size"),
        first_key=r.hexbytes(d, "first_key"),
        last_key=r.hexbytes(d, "last_key"),
        entries=r.int_(d, "entries"),
        min_seq=r.int_(d, "min_seq"),
        max_seq=r.int_(d, "max_seq"),
        db=db,
        range_dels=r.int_(d, "range_dels", 0),
    )


def _tree_from(r: _Reader, raw: Any, n_external: int) -> Tree:
    d = r.dict_(raw, "tree")
    l0 = tuple(_sst_from(r, s, n_external) for s in r.list_(d, "l0"))
    runs = []
    for rr in r.list_(d, "runs"):
        rd = r.dict_(rr, "sorted run")
        runs.append(
            SortedRun(r.int_(rd, "id"), tuple(_sst_from(r, s, n_external) for s in r.list_(rd, "ssts")))
        )
    return Tree(l0, tuple(runs))


def from_body(body: Mapping[str, Any], where: str = "") -> Manifest:
    """Validate a decoded JSON body and build the Manifest."""
    r = _Reader(where)
    external = []
    for e in r.list_(body, "external_dbs"):
        ed = r.dict_(e, "external database")
        external.append(ExternalDb(r.str_(ed, "url"), r.uuid_(ed, "checkpoint_id")))
    n_ext = len(external)
    trees = r.dict_(body.get("trees", {}), "trees")
    checkpoints = []
    for c in r.list_(body, "checkpoints"):
        cd = r.dict_(c, "checkpoint")
        meta = cd.get("metadata") or {}
        if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
            raise r.fail("checkpoint metadata must map strings to strings")
        we = cd.get("writer_epoch")
        checkpoints.append(
            Checkpoint(
                id=r.uuid_(cd, "id"),
                manifest_id=r.int_(cd, "manifest_id"),
                create_time_s=r.num(cd, "create_time_s"),
                expire_time_s=r.opt_num(cd, "expire_time_s"),
                name=None if cd.get("name") is None else r.str_(cd, "name"),
                writer_epoch=None if we is None else r.int_(cd, "writer_epoch"),
                metadata=tuple(sorted(meta.items())),
            )
        )
    tracked = []
    for w in r.list_(body, "tracked_wals"):
        if not (isinstance(w, list) and len(w) == 3):
            raise r.fail("tracked WAL must be [id, size, crc32c]")
        tracked.append(
            TrackedWal(*(r.int_({"v": x}, "v") for x in w))  # each element validated as an integer
        )
    journal = []
    for j in r.list_(body, "journal"):
        jd = r.dict_(j, "journal file")
        jdb = r.int_(jd, "db", 0)
        if jdb > n_ext:
            raise r.fail(f"journal file refers to external database {jdb}")
        journal.append(
            JournalFile(
                r.journal_ref(jd, "id"),
                r.int_(jd, "size"),
                r.int_(jd, "entries"),
                r.int_(jd, "min_seq"),
                r.int_(jd, "max_seq"),
                jdb,
            )
        )
    parent = None
    if body.get("parent") is not None:
        pd = r.dict_(body["parent"], "parent")
        parent = ParentRef(r.str_(pd, "url"), r.uuid_(pd, "checkpoint_id"))
    ingests = []
    for g in r.list_(body, "ingests"):
        gd = r.dict_(g, "ingest record")
        ingests.append(
            IngestRecord(
                id=r.str_(gd, "id", 256),
                manifest_id=r.int_(gd, "manifest_id"),
                time_s=r.num(gd, "time_s"),
                rows=r.int_(gd, "rows"),
                seq=r.int_(gd, "seq"),
                fingerprint=r.str_(gd, "fingerprint", 256) if "fingerprint" in gd else "",
            )
        )
    options = r.dict_(body.get("options", {}), "options")
    if not all(isinstance(v, str) for v in options.values()):
        raise r.fail("options must map strings to strings")
    initialized = body.get("initialized", True)
    if not isinstance(initialized, bool):
        raise r.fail("field 'initialized' must be a boolean")
    m = Manifest(
        id=r.int_(body, "id"),
        writer_epoch=r.int_(body, "writer_epoch"),
        compactor_epoch=r.int_(body, "compactor_epoch"),
        initialized=initialized,
        destroyed_at_s=r.opt_num(body, "destroyed_at_s"),
        next_wal_id=r.int_(body, "next_wal_id", minimum=1),
        replay_after_wal_id=r.int_(body, "replay_after_wal_id"),
        last_l0_seq=r.int_(body, "last_l0_seq"),
        data=_tree_from(r, trees.get("data", {}), n_ext),
        index=_tree_from(r, trees.get("index", {}), n_ext),
        next_run_id=r.int_(body, "next_run_id", 1, minimum=1),
        tracked_wals=tuple(tracked),
        checkpoints=tuple(checkpoints),
        parent=parent,
        external_dbs=tuple(external),
        journal=tuple(journal),
        options=tuple(sorted(options.items())),
        ingests=tuple(ingests),
        extra=tuple(sorted((k, v) for k, v in body.items() if k not in _KNOWN)),
    )
    if m.replay_after_wal_id >= m.next_wal_id:
        raise r.fail("replay_after_wal_id must be below next_wal_id")
    return m
