"""Settings: one frozen dataclass per component, validated on construction.

Units are in the names (``_s`` seconds, ``_bytes`` bytes). Components that can
be turned off (the embedded compactor and garbage collector) are ``None``.
Store, clock and RNG are not settings: they are arguments of ``Db.open``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .errors import InvalidArgument, named_as_typed
from .merge import MergeFunction, MergeOperator, as_operator
from .numbers import check_int, check_number
from .option_names import Seconds, suggest_keywords

MAX_MMAP_THRESHOLD_BYTES = 32 << 20
"""The largest mmap threshold glibc accepts (HEAP_MAX_SIZE / 2 on 64-bit)."""

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

WAL_READ_AHEAD = 16
"""Default GETs of WAL objects in flight during replay (``Settings.wal_read_ahead``)."""

WAL_MAX_IN_FLIGHT = 1
"""Default WAL PUTs in flight at once (``Settings.wal_max_in_flight``): one, the
behaviour before pipelining; raise it for many durable writers on a store with long
round trips (docs/benchmarks.md, "S3 profile")."""
WAL_MAX_IN_FLIGHT_LIMIT = 4
"""The most WAL PUTs one writer may have in flight. An open after a writer that
pipelined fences that writer's window of slots (``engine.recovery.write_fence``), so its
PUTs still on the wire can never land where the next writer's objects go."""

WalRecoveryMode = Literal[
    "absolute_consistency",
    "point_in_time",
    "tolerate_corrupted_tail",
    "skip_corrupted_records",
]
WAL_RECOVERY_MODES: tuple[str, ...] = (
    "absolute_consistency",
    "point_in_time",
    "tolerate_corrupted_tail",
    "skip_corrupted_records",
)
Compression = Literal["none", "lz4", "zstd"]
COMPRESSIONS: tuple[str, ...] = ("none", "lz4", "zstd")


def _positive(name: str, value: float, *, allow_zero: bool = False) -> None:
    # Finite and in range, units in the message: the one check in shaledb.numbers.
    check_number(name, value, minimum=0, above_minimum=not allow_zero)


def _integer(name: str, value: int, *, minimum: int = 0, maximum: int | None = None) -> None:
    check_int(name, value, minimum=minimum, maximum=maximum)


MIN_DISK_CACHE_BYTES = 1 * MiB
"""Smallest disk cache bound: its SQLite index alone takes tens of KiB."""


def _disk_cache(options: Any, prefix: str) -> None:
    """``disk_cache_dir`` is None or a usable path (a ``PathLike`` becomes its text);
    ``disk_cache_bytes`` at least 1 MiB."""
    check_int(f"{prefix}disk_cache_bytes", options.disk_cache_bytes, minimum=MIN_DISK_CACHE_BYTES)
    directory = options.disk_cache_dir
    if directory is None:
        return
    if isinstance(directory, os.PathLike):
        directory = os.fspath(directory)
        object.__setattr__(options, "disk_cache_dir", directory)
    if not isinstance(directory, str) or not directory or "\0" in directory:
        raise InvalidArgument(
            f"{prefix}disk_cache_dir must be a non-empty path without NUL, or None; got {directory!r}"
        )


SCAN_READ_AHEAD_MAX_IN_FLIGHT_LIMIT = 64
"""The most read-ahead GETs one scan may keep in flight."""


def _scan_ahead(options: Any, prefix: str) -> None:
    """Scan read-ahead options: byte counts >= 0, GETs in flight 1 to 64."""
    check_int(f"{prefix}scan_read_ahead_max_bytes", options.scan_read_ahead_max_bytes, minimum=0)
    check_int(
        f"{prefix}scan_read_ahead_max_in_flight",
        options.scan_read_ahead_max_in_flight,
        minimum=1,
        maximum=SCAN_READ_AHEAD_MAX_IN_FLIGHT_LIMIT,
    )
    check_int(f"{prefix}scan_warm_sst_max_bytes", options.scan_warm_sst_max_bytes, minimum=0)


def _boolean(name: str, value: bool) -> None:
    if not isinstance(value, bool):
        raise InvalidArgument(f"{name} must be True or False, got {value!r}")


@suggest_keywords
@dataclass(frozen=True)
class RetryOptions:
    """How the store wrapper retries transient failures.

    Each failed call waits ``initial_backoff_s`` doubled per attempt up to
    ``max_backoff_s`` (with jitter); after ``max_attempts`` attempts or
    ``timeout_s`` seconds the call raises ``Unavailable``. With the defaults
    ``timeout_s`` comes first (about 45 attempts fill a minute), so a store that
    fails fast (connections refused, 503s) is retried as long as one that
    stays silent; ``max_attempts`` used to be 10, which a store failing fast
    spent in about 7 s, stopping a writer in an outage of a few seconds.
    """

    max_attempts: int = 100
    initial_backoff_s: Seconds[float] = Seconds(0.05)
    max_backoff_s: Seconds[float] = Seconds(2.0)
    timeout_s: Seconds[float] = Seconds(60.0)

    def __post_init__(self) -> None:
        _integer("RetryOptions.max_attempts", self.max_attempts, minimum=1)
        _positive("RetryOptions.initial_backoff_s", self.initial_backoff_s, allow_zero=True)
        _positive("RetryOptions.max_backoff_s", self.max_backoff_s, allow_zero=True)
        _positive("RetryOptions.timeout_s", self.timeout_s)


@suggest_keywords
@dataclass(frozen=True)
class CompactorOptions:
    """The size-tiered compactor (embedded in the writer or standalone).

    ``min_l0_ssts``: compact L0 once this many L0 SSTs exist.
    ``max_sources``: most sorted runs merged in one compaction.
    ``min_merge_runs``: fewest sorted runs of similar size merged together.
    ``size_ratio``: runs are "similar" when the largest is at most this many
    times the smallest.
    ``max_space_amplification``: when the bytes above the oldest sorted run
    (L0 SSTs and newer runs) exceed this fraction of it, everything is merged
    into one run. Once compaction settles, stored SST bytes are then at most
    ``1 + this`` times those of the fully compacted database (0.25: about
    1.5x the raw key and value bytes, with the SST format's overhead). Lower
    costs write amplification on growing databases (the whole tree is
    rewritten each time it grows by this fraction); RocksDB's universal
    compaction defaults to 2.0. None turns the rule off.
    ``max_sst_size_bytes``: output SSTs of a sorted run are cut at this size,
    or at a quarter of ``Settings.max_unflushed_bytes`` if that is smaller (an
    output is built in memory; see ``compaction.compactor.working_set``).
    ``max_subcompactions``: key ranges one compaction is split into (run in
    parallel threads).
    ``job_lease_s``: a running job renews its lease object every quarter of
    this; the garbage collector keeps the job's outputs while the lease is
    fresh, so a job may run longer than the GC's ``min_age_s``.
    ``role_lease_s``: a standalone compactor renews its role lease every
    quarter of this. A second one started meanwhile stands by instead of
    fencing it, and takes over once the lease has gone this long without a
    renewal (the holder crashed or was killed), so two compactors under a
    restart-always supervisor no longer fence each other in a loop. Machines'
    clocks must agree within it, as the GC's ``min_age_s`` already assumes.
    """

    poll_interval_s: Seconds[float] = Seconds(1.0)
    min_l0_ssts: int = 4
    max_sources: int = 8
    min_merge_runs: int = 4
    size_ratio: float = 4.0
    max_space_amplification: float | None = 0.25
    max_sst_size_bytes: int = 64 * MiB
    max_subcompactions: int = 1
    manifest_update_timeout_s: Seconds[float] = Seconds(300.0)
    job_lease_s: Seconds[float] = Seconds(600.0)
    role_lease_s: Seconds[float] = Seconds(30.0)

    def __post_init__(self) -> None:
        _positive("CompactorOptions.poll_interval_s", self.poll_interval_s)
        _integer("CompactorOptions.min_l0_ssts", self.min_l0_ssts, minimum=1)
        _integer("CompactorOptions.max_sources", self.max_sources, minimum=2)
        _integer("CompactorOptions.min_merge_runs", self.min_merge_runs, minimum=2)
        if self.min_merge_runs > self.max_sources:
            raise InvalidArgument("CompactorOptions.min_merge_runs must be <= max_sources")
        if self.max_space_amplification is not None:
            _positive("CompactorOptions.max_space_amplification", self.max_space_amplification)
        _positive("CompactorOptions.job_lease_s", self.job_lease_s)
        _positive("CompactorOptions.role_lease_s", self.role_lease_s)
        _positive("CompactorOptions.size_ratio", self.size_ratio)
        if self.size_ratio < 1:
            raise InvalidArgument("CompactorOptions.size_ratio must be >= 1")
        _integer("CompactorOptions.max_sst_size_bytes", self.max_sst_size_bytes, minimum=4 * KiB)
        _integer("CompactorOptions.max_subcompactions", self.max_subcompactions, minimum=1)
        _positive("CompactorOptions.manifest_update_timeout_s", self.manifest_update_timeout_s)


@suggest_keywords
@dataclass(frozen=True)
class GcOptions:
    """The garbage collector (embedded in the writer or standalone).

    Nothing is deleted before it is ``min_age_s`` old, which bounds how long a
    stalled process may keep using an object it read a reference to.
    ``db_delete_grace_s`` is how long a soft-deleted database is kept.
    ``dry_run`` logs what would be deleted and deletes nothing.
    ``wal_retention_s`` keeps WAL objects at least this long (if longer than
    ``min_age_s``), so change-feed consumers (``shaledb.engine.changes``) that fall
    behind by up to this long can catch up instead of hitting ``CursorExpired``.
    """

    interval_s: Seconds[float] = Seconds(60.0)
    min_age_s: Seconds[float] = Seconds(300.0)
    db_delete_grace_s: Seconds[float] = Seconds(86400.0)
    dry_run: bool = False
    wal_retention_s: Seconds[float] = Seconds(0.0)

    def __post_init__(self) -> None:
        _positive("GcOptions.interval_s", self.interval_s)
        _positive("GcOptions.min_age_s", self.min_age_s, allow_zero=True)
        _positive("GcOptions.db_delete_grace_s", self.db_delete_grace_s, allow_zero=True)
        _positive("GcOptions.wal_retention_s", self.wal_retention_s, allow_zero=True)
        _boolean("GcOptions.dry_run", self.dry_run)


RECOVERY_STRATEGIES: tuple[str, ...] = ("retain", "recovr")


@suggest_keywords
@dataclass(frozen=True)
class JournalOptions:
    """The value journal's recovery strategy and journal compaction (docs/design/value-journal.md).

    ``recovery_strategy`` -- "retain" (journal compaction keeps the key changes
    of superseded writes: their index entries and tombstones, so
    ``rebuild-ledger`` restores index history exactly) or "recovr" (drops
    them: smaller journal, but a rebuilt ledger may bring back stale index
    terms and deleted keys). Persisted per database (manifest option
    ``journal_recovery``, "retain" for a new one); None keeps the database's,
    a value changes it at the next L0 flush.
    Journal compaction scores each journal object by sampling about
    ``sample_entries`` entries (the estimated percentage of bytes still
    current) and compacts the best run of up to ``max_run_length``
    consecutive objects when its mean score is below the run's target: from
    ``single_file_target_pct`` for one object up to ``max_run_target_pct``
    for a run of ``max_run_length`` (Leveled's defaults: 30, 70 and 8).
    ``compaction_interval_s`` -- run journal compaction in the writer this often
    (None: only when asked, ``Db.compact_journal`` or the CLI).
    """

    recovery_strategy: str | None = None
    max_run_length: int = 8
    single_file_target_pct: float = 30.0
    max_run_target_pct: float = 70.0
    sample_entries: int = 192
    compaction_interval_s: Seconds[float | None] = Seconds(None)

    def __post_init__(self) -> None:
        if self.recovery_strategy is not None and self.recovery_strategy not in RECOVERY_STRATEGIES:
            raise InvalidArgument(
                f"JournalOptions.recovery_strategy must be one of {RECOVERY_STRATEGIES} or None, "
                f"got {self.recovery_strategy!r}"
            )
        _integer("JournalOptions.max_run_length", self.max_run_length, minimum=1)
        _positive("JournalOptions.single_file_target_pct", self.single_file_target_pct, allow_zero=True)
        _positive("JournalOptions.max_run_target_pct", self.max_run_target_pct, allow_zero=True)
        if self.max_run_target_pct < self.single_file_target_pct or self.max_run_target_pct > 100:
            raise InvalidArgument(
                "JournalOptions.max_run_target_pct must be between single_file_target_pct and 100"
            )
        _integer("JournalOptions.sample_entries", self.sample_entries, minimum=1)
        if self.compaction_interval_s is not None:
            _positive("JournalOptions.compaction_interval_s", self.compaction_interval_s)


@suggest_keywords
@dataclass(frozen=True)
class DbReaderOptions:
    """Options of a :class:`DbReader` (units in the names; validated on construction).

    ``manifest_poll_interval_s`` -- how often a reader without a fixed
    checkpoint looks for a new manifest and new WAL objects (2 GETs per poll
    when idle); new writes become visible within about this long.
    ``checkpoint_lifetime_s`` -- lifetime of the reader's own checkpoint
    (refreshed at half-life); None creates it without expiry (then a crashed
    reader's checkpoint must be deleted by hand). Must exceed twice the poll
    interval, so a refresh is due at least one poll before expiry.
    ``max_memtable_bytes`` -- size of one in-memory table of replayed WAL
    entries (accounted like the writer's memtable).
    ``establish_checkpoint`` -- False: follow the latest manifest without
    writing a checkpoint (see ``shaledb.db.reader``).
    ``background_poll`` -- False: no polling thread; call
    :meth:`DbReader.refresh` to poll (tests, single-threaded tools).
    ``checkpoint_name`` -- name given to the reader's own checkpoints.
    ``block_cache_bytes``, ``sst_read_ahead_bytes`` -- as in :class:`Settings`:
    the decoded-block cache's byte budget, and how much of an SST a block-cache
    miss fetches.
    ``scan_read_ahead_max_bytes``, ``scan_read_ahead_max_in_flight``,
    ``scan_warm_sst_max_bytes`` -- as in :class:`Settings`: scans' read-ahead
    of further chunks and warm-up of small SSTs.
    ``disk_cache_dir``, ``disk_cache_bytes`` -- as in :class:`Settings`: the
    host-local disk cache (a reader may share the writer's directory).
    ``manifest_update_timeout_s`` -- how long one checkpoint change (a manifest
    CAS, retried on conflicts) may take before it raises ``Unavailable``.
    ``wal_read_ahead`` -- as in :class:`Settings`: GETs of WAL objects in flight
    while the reader replays them (a reader that fell behind ramps up to it).
    ``open_in_parallel`` -- as in :class:`Settings`: opening pins SST metadata
    beside its checkpoint and WAL reads; False makes the open's store calls
    one after another.
    ``pin_metadata_on_open`` -- as in :class:`Settings`: opening (and each poll
    that finds new SSTs) fetches every SST's index and filter blocks; False
    leaves each to the first read that needs it, for a reader that reads a few
    keys or only the manifest (``shaledb get``, ``shaledb stats``: one request
    per 16 SSTs of round trips before, on a slow store).
    ``journal_whole_block_max_bytes`` -- as in :class:`Settings`: a get of a
    separated value reads its whole journal block when it is at most this big.
    ``retry`` -- how the reader's store calls retry transient failures.
    """

    manifest_poll_interval_s: Seconds[float] = Seconds(1.0)
    checkpoint_lifetime_s: Seconds[float | None] = Seconds(600.0)
    max_memtable_bytes: int = 64 * MiB
    establish_checkpoint: bool = True
    background_poll: bool = True
    checkpoint_name: str | None = "reader"
    block_cache_bytes: int = 64 * MiB
    sst_read_ahead_bytes: int = 1 * MiB
    scan_read_ahead_max_bytes: int = 8 * MiB
    scan_read_ahead_max_in_flight: int = 4
    scan_warm_sst_max_bytes: int = 32 * MiB
    disk_cache_dir: str | None = None
    disk_cache_bytes: int = 1 * GiB
    manifest_update_timeout_s: Seconds[float] = Seconds(60.0)
    wal_read_ahead: int = WAL_READ_AHEAD
    open_in_parallel: bool = True
    pin_metadata_on_open: bool = True
    journal_whole_block_max_bytes: int = 0
    retry: RetryOptions = field(default_factory=RetryOptions)
    merge_operator: MergeOperator | MergeFunction | str | None = None
    """As ``Settings.merge_operator``; None folds the ready operator the database records
    (``shaledb.merge``), and a key needing any other refuses to be read."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "merge_operator", as_operator(self.merge_operator))
        _positive("DbReaderOptions.manifest_poll_interval_s", self.manifest_poll_interval_s)
        if self.checkpoint_lifetime_s is not None:
            _positive("DbReaderOptions.checkpoint_lifetime_s", self.checkpoint_lifetime_s)
            if self.checkpoint_lifetime_s <= 2 * self.manifest_poll_interval_s:
                raise InvalidArgument(
                    f"checkpoint_lifetime ({self.checkpoint_lifetime_s}s) must exceed twice the "
                    f"manifest_poll_interval ({self.manifest_poll_interval_s}s)"
                )
        _integer("DbReaderOptions.max_memtable_bytes", self.max_memtable_bytes, minimum=1)
        _integer("DbReaderOptions.block_cache_bytes", self.block_cache_bytes, minimum=0)
        _integer("DbReaderOptions.sst_read_ahead_bytes", self.sst_read_ahead_bytes, minimum=0)
        _integer(
            "DbReaderOptions.journal_whole_block_max_bytes", self.journal_whole_block_max_bytes, minimum=0
        )
        _scan_ahead(self, "DbReaderOptions.")
        _disk_cache(self, "DbReaderOptions.")
        _positive("DbReaderOptions.manifest_update_timeout_s", self.manifest_update_timeout_s)
        _integer("DbReaderOptions.wal_read_ahead", self.wal_read_ahead, minimum=1)
        _boolean("DbReaderOptions.establish_checkpoint", self.establish_checkpoint)
        _boolean("DbReaderOptions.background_poll", self.background_poll)
        _boolean("DbReaderOptions.open_in_parallel", self.open_in_parallel)
        _boolean("DbReaderOptions.pin_metadata_on_open", self.pin_metadata_on_open)
        if self.checkpoint_name is not None and not isinstance(self.checkpoint_name, str):
            raise InvalidArgument(
                f"DbReaderOptions.checkpoint_name must be a str or None, got {self.checkpoint_name!r}"
            )
        if not isinstance(self.retry, RetryOptions):
            raise InvalidArgument("DbReaderOptions.retry must be a RetryOptions")


@suggest_keywords
@dataclass(frozen=True)
class Settings:
    """Settings of a writer (``Db``).

    Write path:
      ``flush_interval_s`` -- non-durable writes reach a WAL object at least this
      often (durable writes trigger a flush at once: group commit).
      ``wal_max_bytes`` -- a WAL object is cut when its buffer reaches this size
      (or a sixteenth of ``max_unflushed_bytes``, if smaller: ``wal.wal_object_bytes``).
      ``l0_sst_size_bytes`` -- the memtable is frozen and flushed to an L0 SST at
      this size (accounted bytes include Python's per-entry overhead).
      ``l0_max_wal_objects`` -- the memtable is also frozen and flushed once its
      writes span this many WAL objects (0: no limit). A slow durable writer
      makes one WAL object per write; without it they piled up until the
      memtable reached ``l0_sst_size_bytes`` (hundreds of thousands), and every
      reader's open and every recovery replayed them all. 4,000 (a replay of
      about 250 round trips at 16 GETs in flight) costs local durable single
      puts nothing measurable; 1,000 cost them about 10% (a flush and its
      compaction every 1,000 puts).
      ``max_unflushed_bytes`` -- writes block while memtables not yet in L0
      exceed this (backpressure).
      ``l0_max_ssts`` -- L0 flushes (and then writes) stall while more L0 SSTs
      than this wait for compaction.
    Read path:
      ``block_cache_bytes`` -- byte budget of the decoded-block cache.
      ``sst_read_ahead_bytes`` -- a block-cache miss fetches this much of the SST.
      ``scan_read_ahead_max_bytes`` -- a scan that enters its second read-ahead
      chunk of an SST keeps the chunks after its cursor in flight, the window
      doubling (1, 2, 4 ... chunks) with each chunk it enters up to this many
      bytes (and a quarter of the block cache); less than one chunk: off
      (``shaledb.engine.scan_ahead``).
      ``scan_read_ahead_max_in_flight`` -- the most read-ahead GETs one scan has
      in flight at once (1 to 64).
      ``scan_warm_sst_max_bytes`` -- once scans have started cold in two
      different chunks of an SST with at most this many bytes of data, its other
      chunks are fetched in parallel (while such SSTs fit in half the block
      cache); 0: off.
      ``disk_cache_dir`` -- a local directory that keeps parts of SSTs and journal
      objects read from the store, across restarts and shared by the processes
      of a host (``shaledb.store.disk_cache``; needs the ``cache`` extra). None
      (the default): off.
      ``disk_cache_bytes`` -- the disk cache's bound (index and files); older
      parts are evicted beyond it.
    Memory:
      ``malloc_mmap_threshold_bytes`` -- on glibc, fix malloc's mmap threshold at
      this size when the database opens, so freed SST and WAL buffers go back
      to the OS instead of fragmenting the heap (``shaledb.engine.allocator``). Off
      (None) by default: it changes the allocator of the whole host process,
      which a library must not do unasked. Turn it on (e.g. ``128 * KiB``) in a
      process that mostly runs shaledb and whose resident memory grows tens of
      MiB above the configured budgets (docs/logging.md, "Memory").
    Format:
      ``block_size_bytes``, ``bloom_bits_per_key`` (0 = no filter),
      ``compression`` ("none", "lz4", "zstd").
    Recovery:
      ``track_and_verify_wals`` -- record closed WAL objects (size, CRC32C) in the
      manifest and verify them on open.
      ``wal_recovery_mode`` -- what to do with a damaged WAL object.
      ``wal_read_ahead`` -- replaying the WAL (opening after a crash) keeps up
      to this many GETs of WAL objects in flight, each up to ``wal_max_bytes``:
      about one round trip per this many objects instead of one per object.
      ``open_in_parallel`` -- opening reads what needs nothing from its ordered
      steps (claim, fence, re-read, replay) beside them: the SSTs' index and
      filter blocks, and the manifest's re-read beside the WAL replay
      (docs/design/writer-open-and-recovery.md). False: the open's store calls
      go one after another, in an order that does not depend on thread timing
      (tests that script faults call by call; with ``wal_read_ahead`` 1 for the
      replay's GETs too).
      ``pin_metadata_on_open`` -- opening fetches every SST's index and filter
      blocks (in parallel) and keeps them, so the first reads do not pay for
      them. False leaves each to the first read that needs it: for a writer
      that only writes (a bulk ingest's claim opens so) an open then costs no
      request per SST.
      ``wal_max_in_flight`` -- WAL PUTs in flight at once (1 to 4; default 1): durable
      writes that arrive while a PUT is in flight go out at once in the next
      object instead of waiting for it. Ids stay contiguous and a write is
      acknowledged only once its object and every earlier one are written.
    Value journal (key/value separation, docs/journal.md):
      ``value_separation_threshold`` -- values of at least this many bytes stay
      in the value journal (the WAL objects, kept) and the LSM holds a pointer;
      None keeps every value in the LSM and WAL objects are garbage once in L0.
      ``journal_max_bytes`` -- size of the objects journal compaction writes.
      ``journal_whole_block_max_bytes`` -- a get of a value whose pointer gives its
      byte range (pointer version 2) reads its whole journal block instead, and
      caches it, when that block is at most this many bytes. 0 (the default):
      only the value's own bytes; a write batch is one block, so a whole block
      can be a hundred values. Worth raising on a store with long round trips
      when gets cluster by write batch: a neighbour's get is then a cache hit
      (docs/benchmarks.md, "Value-journal gets read their own bytes").
      ``journal`` -- recovery strategy and journal compaction (:class:`JournalOptions`).
    """

    flush_interval_s: Seconds[float] = Seconds(0.1)
    wal_max_bytes: int = 4 * MiB
    l0_sst_size_bytes: int = 64 * MiB
    l0_max_wal_objects: int = 4000
    max_unflushed_bytes: int = 256 * MiB
    l0_max_ssts: int = 16
    block_size_bytes: int = 4 * KiB
    bloom_bits_per_key: int = 10
    compression: Compression = "none"
    block_cache_bytes: int = 128 * MiB
    sst_read_ahead_bytes: int = 1 * MiB
    scan_read_ahead_max_bytes: int = 8 * MiB
    scan_read_ahead_max_in_flight: int = 4
    scan_warm_sst_max_bytes: int = 32 * MiB
    disk_cache_dir: str | None = None
    disk_cache_bytes: int = 1 * GiB
    malloc_mmap_threshold_bytes: int | None = None
    manifest_poll_interval_s: Seconds[float] = Seconds(1.0)
    manifest_update_timeout_s: Seconds[float] = Seconds(300.0)
    track_and_verify_wals: bool = True
    wal_recovery_mode: WalRecoveryMode = "absolute_consistency"
    wal_read_ahead: int = WAL_READ_AHEAD
    open_in_parallel: bool = True
    pin_metadata_on_open: bool = True
    wal_max_in_flight: int = WAL_MAX_IN_FLIGHT
    value_separation_threshold: int | None = None
    journal_max_bytes: int = 64 * MiB
    journal_whole_block_max_bytes: int = 0
    journal: JournalOptions = field(default_factory=JournalOptions)
    retry: RetryOptions = field(default_factory=RetryOptions)
    compactor: CompactorOptions | None = field(default_factory=CompactorOptions)
    garbage_collector: GcOptions | None = field(default_factory=GcOptions)
    history_retention_s: Seconds[float | None] = Seconds(None)
    """Keep old versions this long for ``Db.snapshot(at_seq=/at_time=)`` (0: off; None, the
    default: the window the database's manifest records, off for a new database; see
    ``shaledb.engine.history``)."""
    merge_operator: MergeOperator | MergeFunction | str | None = None
    """What ``Db.merge`` operands are folded with: a module-level function ``(key, existing,
    operands) -> bytes``, a :class:`~shaledb.merge.MergeOperator`, or a ready one's name
    (``"add_u64"``, ``"append"``, ``"max_u64"``); a lambda or nested function is refused, its
    name not telling it from another (see ``shaledb.merge``)."""

    def __post_init__(self) -> None:
        _positive("flush_interval_s", self.flush_interval_s)
        if self.history_retention_s is not None:
            _positive("history_retention_s", self.history_retention_s, allow_zero=True)
        object.__setattr__(self, "merge_operator", as_operator(self.merge_operator))
        _integer("wal_max_bytes", self.wal_max_bytes, minimum=1)
        _integer("l0_sst_size_bytes", self.l0_sst_size_bytes, minimum=4 * KiB)
        _integer("l0_max_wal_objects", self.l0_max_wal_objects, minimum=0)
        _integer("max_unflushed_bytes", self.max_unflushed_bytes, minimum=1)
        if self.max_unflushed_bytes < self.l0_sst_size_bytes:
            raise InvalidArgument(
                "max_unflushed_bytes must be >= l0_sst_size_bytes "
                f"({self.max_unflushed_bytes} < {self.l0_sst_size_bytes}); "
                "raise it or lower l0_sst_size_bytes"
            )
        _integer("l0_max_ssts", self.l0_max_ssts, minimum=1)
        _integer("block_size_bytes", self.block_size_bytes, minimum=256)
        if self.block_size_bytes > 16 * MiB:
            raise InvalidArgument("block_size_bytes must be <= 16 MiB")
        _integer("bloom_bits_per_key", self.bloom_bits_per_key, minimum=0)
        if self.compression not in COMPRESSIONS:
            raise InvalidArgument(f"compression must be one of {COMPRESSIONS}, got {self.compression!r}")
        _integer("block_cache_bytes", self.block_cache_bytes, minimum=0)
        _integer("sst_read_ahead_bytes", self.sst_read_ahead_bytes, minimum=0)
        _scan_ahead(self, "")
        _disk_cache(self, "")
        if self.malloc_mmap_threshold_bytes is not None:
            _integer("malloc_mmap_threshold_bytes", self.malloc_mmap_threshold_bytes, minimum=1)
            if self.malloc_mmap_threshold_bytes > MAX_MMAP_THRESHOLD_BYTES:
                raise InvalidArgument(
                    f"malloc_mmap_threshold_bytes must be <= {MAX_MMAP_THRESHOLD_BYTES} (glibc's limit), "
                    "or None"
                )
        _positive("manifest_poll_interval_s", self.manifest_poll_interval_s)
        _positive("manifest_update_timeout_s", self.manifest_update_timeout_s)
        _boolean("track_and_verify_wals", self.track_and_verify_wals)
        _boolean("open_in_parallel", self.open_in_parallel)
        _boolean("pin_metadata_on_open", self.pin_metadata_on_open)
        _integer("wal_read_ahead", self.wal_read_ahead, minimum=1)
        _integer("wal_max_in_flight", self.wal_max_in_flight, minimum=1, maximum=WAL_MAX_IN_FLIGHT_LIMIT)
        if self.wal_recovery_mode not in WAL_RECOVERY_MODES:
            raise InvalidArgument(
                f"wal_recovery_mode must be one of {WAL_RECOVERY_MODES}, got {self.wal_recovery_mode!r}"
            )
        if self.value_separation_threshold is not None:
            _integer("value_separation_threshold", self.value_separation_threshold, minimum=1)
        _integer("journal_max_bytes", self.journal_max_bytes, minimum=4 * KiB)
        _integer("journal_whole_block_max_bytes", self.journal_whole_block_max_bytes, minimum=0)
        if not isinstance(self.journal, JournalOptions):
            raise InvalidArgument(f"journal must be a JournalOptions, got {self.journal!r}")
        for name, typ in (
            ("retry", RetryOptions),
            ("compactor", CompactorOptions),
            ("garbage_collector", GcOptions),
        ):
            value = getattr(self, name)
            if value is not None and not isinstance(value, typ):
                raise InvalidArgument(f"{name} must be a {typ.__name__} or None, got {value!r}")
        if self.retry is None:
            raise InvalidArgument("retry must be a RetryOptions")

    def replace(self, **changes: Any) -> Settings:
        """A copy with ``changes`` applied (and validated)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (for logs, the CLI and Spark options)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Settings:
        """Inverse of :meth:`to_dict`; unknown keys are an error."""
        if not isinstance(data, dict):
            raise InvalidArgument(f"settings must be a dict, got {type(data).__name__}")
        data = dict(data)
        nested = {
            "retry": RetryOptions,
            "compactor": CompactorOptions,
            "garbage_collector": GcOptions,
            "journal": JournalOptions,
        }
        for key, typ in nested.items():
            if isinstance(data.get(key), dict):
                known = {f.name for f in dataclasses.fields(typ)}
                extra = set(data[key]) - known
                if extra or not all(isinstance(k, str) for k in data[key]):
                    raise InvalidArgument(f"unknown {key} settings: {sorted(map(str, extra))}")
                # named as given: garbage_collector.interval_s
                with named_as_typed({field: (f"{key}.{field}", None) for field in data[key]}):
                    data[key] = typ(**data[key])
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = {str(k) for k in data} - names
        if unknown:
            raise InvalidArgument(f"unknown settings: {sorted(unknown)}")
        return cls(**data)

    @classmethod
    def from_env(cls, prefix: str = "SHALEDB_", env: Mapping[str, str] | None = None) -> Settings:
        """Settings from environment variables (``SHALEDB_FLUSH_INTERVAL_S``, nested:
        ``SHALEDB_COMPACTOR__MAX_SOURCES``); unknown names are refused (``shaledb.settings_load``)."""
        from .settings_load import from_env

        return from_env(cls, prefix, env)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Settings:
        """Settings from a TOML file (top-level keys, a table per nested option)."""
        from .settings_load import from_file

        return from_file(cls, path)

    def to_toml(self) -> str:
        """These settings as TOML that :meth:`from_file` reads back equal."""
        from .settings_load import to_toml

        return to_toml(self)
