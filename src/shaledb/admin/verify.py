"""Verify a database: every reference resolves and every byte checks out.

``verify(url)`` is what an operator runs after an incident, a restore or a
migration, without opening a writer (nothing is fenced, nothing is written).
It checks, for the latest manifest and every manifest a live checkpoint pins:

* the manifest decodes and satisfies the manifest invariants;
* every SST and journal object it references exists with the recorded size
  (in a clone's ancestors too) and, with ``deep=True``, decodes completely:
  every block's CRC32C, the entry count, the key range and the sequence range
  the manifest recorded;
* every tracked WAL object exists with its recorded size and CRC32C, the WAL
  ids after the replay point are contiguous, and (deep) each WAL object
  decodes.

Problems are collected, not raised, so one run lists all of them; each names
the object. The report says how much was read, so the cost of a deep check
on a large database is visible.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ..clock import Clock
from ..engine.parents import ExternalStores
from ..errors import CorruptionError, NotFound, ObjectNotFound, ShaleError
from ..format import paths
from ..format.coding import crc32c
from ..format.sst import decode_sst
from ..format.wal import EpochGate, wal_object_epoch
from ..manifest.invariants import ManifestInvariantError, check_manifest
from ..manifest.model import Manifest, SstInfo, TrackedWal
from ..manifest.store import ManifestStore
from ..store.base import ObjectStore
from ..store.parallel import DEFAULT_WORKERS, Progress, check_workers, run_bounded
from .handle import AdminHandle


@dataclass
class VerifyReport:
    """What ``verify`` looked at and what it found wrong."""

    manifests: list[int] = field(default_factory=list)
    ssts: int = 0
    journal_objects: int = 0
    wal_objects: int = 0
    bytes_read: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "manifests": self.manifests,
            "ssts": self.ssts,
            "journal_objects": self.journal_objects,
            "wal_objects": self.wal_objects,
            "bytes_read": self.bytes_read,
            "problems": self.problems,
        }


class _Verifier:
    """Walks the manifests in the caller's thread; the object checks it queues run in
    parallel at the end (:meth:`run`), so a deep check of a large database on S3
    overlaps its round trips."""

    def __init__(self, store: ObjectStore, ms: ManifestStore, external: ExternalStores, deep: bool) -> None:
        self.store = store
        self.ms = ms
        self.external = external
        self.deep = deep
        self.report = VerifyReport()
        self._seen: set[tuple[int, str]] = set()
        self._checks: list[tuple[int, Callable[[], None]]] = []  # (bytes it reads, the check)
        self._lock = threading.Lock()
        self._wal_epochs: dict[int, int | None] = {}
        """Deep check: each WAL object's writer epoch (None: zero-length), for :meth:`wal_order`."""

    def problem(self, path: str, message: str) -> None:
        with self._lock:
            self.report.problems.append(f"{path}: {message}")

    def store_of(self, db: int, m: Manifest) -> ObjectStore | None:
        if db == 0:
            return self.store
        try:
            return self.external.store_for(db, m)
        except ShaleError as exc:
            self.problem(f"external database #{db}", str(exc))
            return None

    def later(self, size: int, check: Callable[[], None]) -> None:
        self._checks.append((size if self.deep else 0, check))

    def run(self, workers: int, progress: Progress | None) -> None:
        checks = self._checks
        self._checks = []
        done = run_bounded(lambda c: c[1](), checks, lambda c: c[0], workers=workers, name="shaledb-verify")
        total = sum(c[0] for c in checks)
        by_bytes = total > 0  # deep: the bytes to read; shallow (nothing read): objects
        n = 0
        for (size, _), _ in done:
            n += size if by_bytes else 1
            if progress is not None:
                progress(n, total if by_bytes else len(checks))
        self.report.problems.sort()

    def read(self, store: ObjectStore, path: str, size: int | None) -> bytes | None:
        try:
            if self.deep:
                data = store.get(path)
                with self._lock:
                    self.report.bytes_read += len(data)
                actual = len(data)
            else:
                data = b""
                actual = store.head(path).size
        except ObjectNotFound:
            self.problem(path, "missing")
            return None
        except ShaleError as exc:
            self.problem(path, f"unreadable: {exc}")
            return None
        if size is not None and actual != size:
            self.problem(path, f"is {actual} bytes, the manifest records {size}")
            return None
        return data

    def sst(self, m: Manifest, info: SstInfo) -> None:
        if (info.db, info.id) in self._seen:
            return
        self._seen.add((info.db, info.id))
        self.report.ssts += 1
        store = self.store_of(info.db, m)
        if store is not None:
            self.later(info.size, partial(self._check_sst, store, info))

    def _check_sst(self, store: ObjectStore, info: SstInfo) -> None:
        path = paths.sst_path(info.id)
        data = self.read(store, path, info.size)
        if not data:
            return
        try:
            meta, blocks = decode_sst(data)
        except CorruptionError as exc:
            self.problem(path, f"damaged: {exc}")
            return
        p = meta.props
        checks = [
            (p.entries == info.entries, f"holds {p.entries} entries, the manifest records {info.entries}"),
            (
                p.first_key == info.first_key and p.last_key == info.last_key,
                "key range differs from the manifest",
            ),
            (
                p.min_seq >= info.min_seq and p.max_seq <= info.max_seq,
                "sequence range exceeds the manifest's",
            ),
        ]
        keys = [k for b in blocks for k in b.keys]
        checks.append((keys == sorted(keys), "keys are not in order"))
        for ok, message in checks:
            if not ok:
                self.problem(path, message)

    def journal(self, m: Manifest) -> None:
        for jf in m.journal:
            if (jf.db, f"j{jf.id}") in self._seen:
                continue
            self._seen.add((jf.db, f"j{jf.id}"))
            self.report.journal_objects += 1
            store = self.store_of(jf.db, m)
            if store is not None:
                self.later(
                    jf.size, partial(self._check_journal, store, paths.journal_object_path(jf.id), jf.size)
                )

    def _check_journal(self, store: ObjectStore, path: str, size: int) -> None:
        data = self.read(store, path, size)
        if data:
            self._decodes(path, data)

    def _decodes(self, path: str, data: bytes) -> None:
        try:
            decode_sst(data)
        except CorruptionError as exc:
            self.problem(path, f"damaged: {exc}")

    def wal(self, m: Manifest) -> None:
        present: dict[int, int] = {}
        for meta in self.store.list(paths.WAL_DIR, offset=paths.wal_path(m.replay_after_wal_id)):
            wid = paths.parse_wal_id(meta.path)
            if wid is not None and wid > m.replay_after_wal_id:
                present[wid] = meta.size
        if present:
            gaps = [i for i in range(m.replay_after_wal_id + 1, max(present)) if i not in present]
            if gaps:
                self.problem(paths.wal_path(gaps[0]), f"missing ({len(gaps)} WAL ids missing in all)")
        tracked = {w.id: w for w in m.tracked_wals}
        for wid in sorted(set(present) | set(tracked)):
            path = paths.wal_path(wid)
            self.report.wal_objects += 1
            w = tracked.get(wid)
            if w is not None and wid not in present:
                self.problem(path, f"tracked ({w.size} bytes) but missing")
                continue
            if not self.deep:
                if w is not None and present[wid] != w.size:
                    self.problem(path, f"is {present[wid]} bytes, the manifest tracked {w.size}")
                continue
            self.later(present[wid], partial(self._check_wal, wid, w))

    def _check_wal(self, wid: int, w: TrackedWal | None) -> None:
        path = paths.wal_path(wid)
        data = self.read(self.store, path, w.size if w is not None else None)
        if data is None:
            return
        if w is not None and crc32c(data) != w.crc32c:
            self.problem(path, "CRC32C differs from the manifest's record")
        if data:
            self._decodes(path, data)
        try:
            epoch = wal_object_epoch(data)
        except CorruptionError:
            return  # (reported by the decode above)
        with self._lock:
            self._wal_epochs[wid] = epoch

    def wal_order(self) -> None:
        """After the deep checks: a zero-length WAL object between objects of one writer is
        an emptied data object, not a fence (:class:`~shaledb.format.wal.EpochGate`)."""
        gate = EpochGate()
        for wid in sorted(self._wal_epochs):
            try:
                gate.admit_epoch(self._wal_epochs[wid], paths.wal_path(wid))
            except CorruptionError as exc:
                self.problem(exc.path or paths.wal_path(wid), exc.reason)

    def manifest(self, m: Manifest) -> None:
        self.report.manifests.append(m.id)
        try:
            check_manifest(m)
        except ManifestInvariantError as exc:
            self.problem(paths.manifest_path(m.id), f"breaks an invariant: {exc}")
        for info in m.all_ssts():
            self.sst(m, info)
        self.journal(m)


def verify(
    url: str | os.PathLike[str] | None = None,
    *,
    deep: bool = True,
    store: ObjectStore | None = None,
    clock: Clock | None = None,
    store_options: Mapping[str, Any] | None = None,
    workers: int = DEFAULT_WORKERS,
    progress: Progress | None = None,
) -> VerifyReport:
    """Check the database at ``url`` (see module docstring); never writes.

    ``workers`` objects are checked at once; ``progress(done, total)`` (bytes
    read of the bytes to read; objects when ``deep=False``) is
    called after each object checked.
    """
    check_workers(workers)
    with AdminHandle(url, store, store_options, clock, None, "verify") as h:
        ms, clock = h.ms, h.clock
        v = _Verifier(h.store, ms, h.external, deep)
        try:
            latest = ms.read_latest()
        except CorruptionError as exc:
            v.problem("manifest", f"latest manifest is damaged: {exc}")
            return v.report
        if latest is None:
            raise NotFound(f"no database at {h.store.describe()}")
        v.manifest(latest)
        v.wal(latest)
        for cp in latest.checkpoints:
            if cp.expired(clock.now()) or cp.manifest_id == latest.id or cp.manifest_id in v.report.manifests:
                continue
            try:
                v.manifest(ms.read(cp.manifest_id))
            except ObjectNotFound:
                v.problem(paths.manifest_path(cp.manifest_id), f"pinned by checkpoint {cp.id} but missing")
            except CorruptionError as exc:
                v.problem(paths.manifest_path(cp.manifest_id), f"damaged: {exc}")
        v.run(workers, progress)
        v.wal_order()
        v.report.problems.sort()
        return v.report


__all__ = ["VerifyReport", "verify"]
