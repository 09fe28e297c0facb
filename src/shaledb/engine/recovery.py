"""Opening a database for writing: claim the epoch, fence, verify, replay.

1. Bump ``writer_epoch`` with a manifest CAS (docs/design/writer-open-and-recovery.md).
2. Write a fencing WAL object (an empty WAL SST carrying our epoch) at the
   first free WAL id. If the slot is taken, the object there decides (the
   protocol's four outcomes): an older epoch means an old writer got there
   first, so try the next id; a newer epoch means we were fenced before we
   started; our own epoch cannot happen unless the manifest CAS was broken.
   The first free id is the first hole: a writer with several PUTs in flight
   can crash with object N+1 written and N not (nothing in N+1 was
   acknowledged). The fence then goes at N, and the slots after it, as many
   as the largest window of PUTs in flight any writer of the database claimed
   (``OPT_WAL_WINDOW``, none if no writer pipelined), are fenced too (in
   parallel: one more round trip), so none of the old writer's PUTs still on
   the wire -- seen or not -- can land where ours go, and every
   reader skips the older epoch's objects after the first fence (``EpochGate``).
3. Re-read the manifest: we must still own the epoch.
4. Verify the WAL (docs/design/wal.md) and replay every object after
   ``replay_after_wal_id`` into the memtable. Steps 3 and 4 only read, and 4
   needs nothing from 3 but the writer-owned replay point, so they run at the
   same time (:func:`confirm_and_replay`); nothing replayed is used unless 3
   confirms the epoch.

WAL verification with ``track_and_verify_wals``: every WAL object the manifest
tracks must exist with its recorded size and CRC32C, and the ids present must
be contiguous (a gap with later objects present means a lost object). An
object store never leaves a torn object, so damage is corruption, not an
interrupted write: ``absolute_consistency`` (the default) refuses to open.
The salvage modes (RocksDB's names) choose what to give up, and log it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ..errors import (
    AlreadyExists,
    ConflictError,
    CorruptionError,
    FencedError,
    NotFound,
    ObjectNotFound,
)
from ..format import paths
from ..format.coding import crc32c
from ..format.journal import wal_ref
from ..format.sst import decode_data_block, decode_meta
from ..format.wal import EpochGate, Locations, encode_wal, locate_values, wal_object_epoch
from ..manifest.edits import ClaimWriterEpoch
from ..manifest.model import JournalFile, Manifest, TrackedWal
from ..manifest.options import OPT_WAL_WINDOW
from ..manifest.store import ManifestStore
from ..settings import WAL_MAX_IN_FLIGHT_LIMIT, WAL_READ_AHEAD
from ..store.base import ObjectStore
from ..store.parallel import in_background, run_bounded
from .wal_read import fetch_wal_objects

log = logging.getLogger("shaledb.recovery")


def claim_writer_epoch(
    ms: ManifestStore,
    *,
    timeout_s: float,
    create_if_missing: bool,
    extra: Callable[[Manifest, int], Manifest] | None = None,
    before_create: Callable[[], None] | None = None,
    latest: Manifest | None = None,
) -> Manifest:
    """Bump ``writer_epoch`` by CAS; create the database if allowed.

    ``before_create`` runs only when there is no manifest yet, before the first
    is written (the check that the new root does not nest with another
    database's, :mod:`shaledb.store.new_root`): opening an existing database
    pays nothing for it. ``latest``: a version the caller just read, tried first
    instead of reading it again (a hint, safe however old: the claim's create-if-absent
    of the next id conflicts with any newer version, and ``ManifestStore.write_new``
    lists newer ids after its create, so a stale hint costs a retry, never a fork)."""
    if latest is None:
        latest = ms.read_latest()
    if latest is None:
        if not create_if_missing:
            raise NotFound(f"no database at {ms.store.describe()}")
        if before_create is not None:
            before_create()
        try:
            ms.create_initial(Manifest(id=1))
        except Exception as exc:
            if not isinstance(exc, ConflictError):
                raise

    # the version just read is the first attempt's (a conflict re-reads): no second listing
    return ms.update(ClaimWriterEpoch(ms.store.describe(), extra), timeout_s=timeout_s, current=latest)


def first_free_wal_id(store: ObjectStore, after: int) -> tuple[int, int]:
    """``(first id above after with no object, highest id present)``: one listing."""
    free = after + 1
    top = after
    for meta in store.list(paths.WAL_DIR, offset=paths.wal_path(after)):
        wid = paths.parse_wal_id(meta.path)
        if wid is None or wid <= after:
            continue
        if wid == free:
            free += 1
        top = max(top, wid)
    return free, top


def write_fence(
    store: ObjectStore, m: Manifest, epoch: int, *, nonce: bytes, now_ms: int, codec: int
) -> tuple[int, TrackedWal]:
    """Fence older writers: the last WAL id we fenced and the first fence's tracking record.

    The first fence goes at the first free slot; the ``wal_window(m) - 1``
    slots after it (and any up to the highest object present, after a crash
    that left a hole) are fenced too (see the module docstring). The returned id
    is the last of them: our objects start after it. Replay stops at the first
    (the record's id): nothing after it belongs to the log.
    """
    data = encode_wal([], [], epoch=epoch, nonce=nonce, created_at_ms=now_ms, codec=codec, block_size=4096)
    window = wal_window(m)
    free, top = first_free_wal_id(store, m.replay_after_wal_id)
    tracked = max((w.id for w in m.tracked_wals), default=0)
    if free <= top and (top - free >= window or free <= tracked):
        free = top + 1  # a tracked object, or objects beyond any window of PUTs in flight: a
        # lost object, not a crash's hole; the fence goes after them and verification names it
    wal_id, rec = _fence_at(store, max(m.next_wal_id, free), data, epoch)
    if (epoch <= 1 or window <= 1) and wal_id >= top:
        return wal_id, rec  # the first writer, or no writer pipelined: nobody's PUTs can land above
    last = max(top, wal_id + window - 1)
    if wal_id < top:
        log.warning(
            "WAL slot %d was empty below objects up to %d (a writer crashed with PUTs in flight); "
            "fenced it and the slots up to %d",
            wal_id,
            top,
            last,
        )

    def fill(wid: int) -> None:
        try:
            store.put(paths.wal_path(wid), data, create=True)
        except AlreadyExists:
            pass  # the old writer's object (skipped by EpochGate) or a newer writer's (the re-read of
            # the manifest after fencing finds the newer epoch)

    for _ in run_bounded(fill, range(wal_id + 1, last + 1), lambda _: 0, workers=WAL_MAX_IN_FLIGHT_LIMIT):
        pass
    return last, rec


def wal_window(m: Manifest) -> int:
    """The largest window of WAL PUTs in flight a writer of ``m``'s database claimed (``OPT_WAL_WINDOW``)."""
    raw = m.option(OPT_WAL_WINDOW, "1") or "1"
    return max(1, min(int(raw) if raw.isdigit() else WAL_MAX_IN_FLIGHT_LIMIT, WAL_MAX_IN_FLIGHT_LIMIT))


def claim_wal_window(m: Manifest, max_in_flight: int) -> Manifest:
    """``m`` recording that a writer with ``max_in_flight`` PUTs in flight claims it (the
    epoch-bump CAS, before its first PUT): the option only grows."""
    if max_in_flight <= wal_window(m):
        return m
    opts = dict(m.options)
    opts[OPT_WAL_WINDOW] = str(max_in_flight)
    return replace(m, options=tuple(sorted(opts.items())))


def _fence_at(store: ObjectStore, wal_id: int, data: bytes, epoch: int) -> tuple[int, TrackedWal]:
    """Write the fence ``data`` at ``wal_id`` or the first slot after it an older writer did not take."""
    for _ in range(100_000):
        path = paths.wal_path(wal_id)
        try:
            store.put(path, data, create=True)
            return wal_id, TrackedWal(wal_id, len(data), crc32c(data))
        except AlreadyExists:
            theirs = store.get(path)
            if theirs == data:
                return wal_id, TrackedWal(wal_id, len(data), crc32c(data))
            try:
                other = wal_object_epoch(theirs)
            except CorruptionError as exc:
                raise exc.with_path(path) from exc
            if other is not None and other > epoch:
                raise FencedError(
                    f"writer epoch {other} fenced this writer (epoch {epoch}) at {path}"
                ) from None
            if other == epoch:
                raise CorruptionError(f"another writer holds this writer's epoch {epoch}", path) from None
            wal_id += 1  # an older writer took the slot first: try the next one
    raise CorruptionError("could not find a free WAL slot")


def confirm_and_replay(
    ms: ManifestStore,
    claimed: Manifest,
    epoch: int,
    fence_id: int,
    *,
    verify: bool,
    mode: str,
    threshold: int | None = None,
    read_ahead: int = WAL_READ_AHEAD,
    parallel: bool = True,
) -> tuple[Manifest, ReplayResult]:
    """Steps 3 and 4 at once: re-read the manifest while replaying the WAL from ``claimed``.

    The re-read is one round trip and the replay one or more; neither needs
    the other's answer (the replay point and tracked WALs only change by the
    writer holding the epoch, which the re-read confirms is us), so running
    them one after the other only adds a round trip. The replay's result is
    returned only once the re-read confirms the epoch; a replay error is
    raised only if it does (a newer writer explains the failure better). A
    re-read that finds another replay point (not expected) replays again from it.
    ``parallel`` False (``Settings.open_in_parallel``) runs them one after the
    other: the re-read, then the replay (with ``read_ahead`` GETs in flight).
    """
    if not parallel:
        m = _check_epoch(ms.require_latest(), epoch)
        return m, replay_wal(
            ms.store, m, fence_id, verify=verify, mode=mode, threshold=threshold, read_ahead=read_ahead
        )
    reread = in_background(ms.require_latest, name="shaledb-open")
    try:
        replay = replay_wal(
            ms.store, claimed, fence_id, verify=verify, mode=mode, threshold=threshold, read_ahead=read_ahead
        )
    except BaseException:
        _check_epoch(reread.result(), epoch)
        raise
    m = _check_epoch(reread.result(), epoch)
    if (m.replay_after_wal_id, m.tracked_wals) != (claimed.replay_after_wal_id, claimed.tracked_wals):
        replay = replay_wal(
            ms.store, m, fence_id, verify=verify, mode=mode, threshold=threshold, read_ahead=read_ahead
        )
    return m, replay


def _check_epoch(m: Manifest, epoch: int) -> Manifest:
    if m.writer_epoch != epoch:
        raise FencedError(f"writer epoch {m.writer_epoch} took over while this writer (epoch {epoch}) opened")
    return m


@dataclass
class ReplayResult:
    """WAL contents to load into the memtable, and what was given up."""

    keys: list[bytes] = field(default_factory=list)
    ents: list[tuple[int, int, bytes]] = field(default_factory=list)
    max_seq: int = 0
    objects: list[TrackedWal] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    locs: Locations = field(default_factory=dict)
    """Pointers to replayed values at or above the separation threshold."""
    journal: list[JournalFile] = field(default_factory=list)
    """Replayed objects with entries and no damage (journal files once in L0)."""
    marks: list[tuple[int, int]] = field(default_factory=list)
    """``(created_at_ms, newest seq replayed)`` per object with entries: when its writes
    were made, for time-travel reads by time (``shaledb.engine.history``)."""


def replay_wal(
    store: ObjectStore,
    m: Manifest,
    fence_id: int,
    *,
    verify: bool,
    mode: str,
    threshold: int | None = None,
    read_ahead: int = WAL_READ_AHEAD,
) -> ReplayResult:
    """Read WAL objects in ``(replay_after_wal_id, fence_id)`` (see module docstring),
    ``read_ahead`` GETs at a time (``store.parallel.get_in_order``)."""
    lo = m.replay_after_wal_id
    present: dict[int, int] = {}
    for meta in store.list(paths.WAL_DIR, offset=paths.wal_path(lo)):
        wid = paths.parse_wal_id(meta.path)
        if wid is not None and lo < wid < fence_id:
            present[wid] = meta.size
    tracked = {w.id: w for w in m.tracked_wals if w.id > lo} if verify else {}
    res = ReplayResult()
    if verify:
        for wid, w in sorted(tracked.items()):
            if wid not in present:
                raise CorruptionError(
                    f"tracked WAL object is missing (recorded {w.size} bytes)", paths.wal_path(wid)
                )
            if present[wid] < w.size:
                raise CorruptionError(
                    f"tracked WAL object is {present[wid]} bytes, manifest recorded {w.size}",
                    paths.wal_path(wid),
                )
        if present:
            top = max(present)
            gaps = [i for i in range(lo + 1, top) if i not in present]
            if gaps:
                raise CorruptionError(
                    f"WAL ids are not contiguous: {len(gaps)} missing below {top} "
                    f"(first missing {paths.wal_path(gaps[0])})",
                    paths.wal_path(gaps[0]),
                )
    ids = sorted(present)
    gate = EpochGate()
    gap = next((p for p in range(1, len(ids)) if ids[p - 1] != ids[p] - 1), None) if not verify else None
    replayed = ids if gap is None else ids[:gap]
    with fetch_wal_objects(store, replayed, read_ahead) as fetched:
        for pos, (wid, (path, data)) in enumerate(zip(replayed, fetched)):
            if data is None:
                raise CorruptionError("WAL object vanished during recovery", path)
            crc = crc32c(data)
            res.objects.append(TrackedWal(wid, len(data), crc))
            tw = tracked.get(wid)
            if tw is not None and (tw.size != len(data) or tw.crc32c != crc):
                damaged = f"checksum or size differs from the manifest's record ({tw.size} bytes)"
            else:
                damaged = None
            try:
                admitted = gate.admit(data, path)
            except CorruptionError as exc:  # an emptied WAL object before this one (EpochGate)
                if _damage(res, exc.path or path, exc.reason, mode, lambda: False, whole=True):
                    res.skipped.append(
                        f"not replayed after the damage: {', '.join(paths.wal_path(i) for i in ids[pos:])}"
                    )
                    break
                admitted = gate.admit(data, path)  # (the gate has let the empty object go)
            if not admitted:
                continue  # a crashed writer's object after the hole the next writer fenced
            is_tail = functools.partial(_only_fences, store, ids[pos + 1 :])
            stop = _replay_object(res, path, data, damaged, mode, is_tail, wid, threshold)
            if stop:
                rest = [paths.wal_path(i) for i in ids[pos + 1 :]]
                if rest:
                    res.skipped.append(f"not replayed after the damage: {', '.join(rest)}")
                break
        else:
            if gap is not None:
                stop_at, resume = ids[gap - 1], ids[gap]
                res.skipped.append(f"WAL ids stop at {stop_at}; objects from {resume} on are not replayed")
                log.warning("WAL gap before %s; not replaying later objects (verification is off)", resume)
    return res


def _replay_object(
    res: ReplayResult,
    path: str,
    data: bytes,
    damaged: str | None,
    mode: str,
    is_last: Callable[[], bool],
    wal_id: int,
    threshold: int | None,
) -> bool:
    """Replay one object; True to stop replaying further objects."""
    if not data:
        return False  # a zero-length fencing object
    try:
        meta = decode_meta(data, len(data))
    except CorruptionError as exc:
        return _damage(res, path, f"metadata: {exc}", mode, is_last, whole=True)
    offs = meta.index.offsets
    intact = damaged is None
    before = res.max_seq
    stop = False
    for i in range(len(meta.index)):
        try:
            block = decode_data_block(data[offs[i] : offs[i + 1]])
        except CorruptionError as exc:
            intact = False
            if _damage(res, path, f"block {i}: {exc}", mode, is_last, whole=False):
                stop = True
                break
            continue
        n = len(block)
        seqs = block.seqs
        kinds = block.kinds
        ents = list(zip(seqs, kinds, block.payloads(0, n)))
        if threshold is not None and n:
            locate_values(wal_id, block.keys, ents, [offs[i], offs[i + 1]], [n], threshold, res.locs, data)
        res.keys.extend(block.keys)
        res.ents.extend(ents)
        if n:
            res.max_seq = max(res.max_seq, *seqs)
    if res.max_seq > before:
        res.marks.append((meta.props.created_at_ms, res.max_seq))
    if stop:
        return True
    if damaged is not None and mode == "absolute_consistency":
        raise CorruptionError(damaged, path)
    p = meta.props
    if intact and p.entries:
        res.journal.append(JournalFile(wal_ref(wal_id), len(data), p.entries, p.min_seq, p.max_seq))
    return False


def _only_fences(store: ObjectStore, wal_ids: list[int]) -> bool:
    """True if every object in ``wal_ids`` is an empty fencing object.

    A damaged object is still the tail of the log when only fences follow it:
    an open that refused the damage has already written its fence.
    """
    for wid in wal_ids:
        try:
            data = store.get(paths.wal_path(wid))
            if data and decode_meta(data, len(data)).props.entries:
                return False
        except (ObjectNotFound, CorruptionError):
            return False
    return True


def _damage(
    res: ReplayResult, path: str, what: str, mode: str, is_last: Callable[[], bool], *, whole: bool
) -> bool:
    if mode == "absolute_consistency":
        raise CorruptionError(
            f"damaged WAL object ({what}); use a salvage wal_recovery_mode to open anyway", path
        )
    if mode == "tolerate_corrupted_tail":
        if not is_last():
            raise CorruptionError(f"damaged WAL object before the tail ({what})", path)
        res.skipped.append(f"{path}: dropped the damaged tail ({what})")
        log.warning("WAL recovery dropped the damaged tail of %s: %s", path, what)
        return True
    if mode == "point_in_time":
        res.skipped.append(f"{path}: stopped at damage ({what})")
        log.warning("WAL recovery stopped at %s: %s", path, what)
        return True
    res.skipped.append(f"{path}: skipped {'object' if whole else 'block'} ({what})")
    log.warning("WAL recovery skipped %s in %s: %s", "the object" if whole else "a block", path, what)
    return False
