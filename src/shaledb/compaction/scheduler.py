"""Which compactions to run: a pure function of one manifest.

:func:`schedule` looks at one tree of a :class:`~shaledb.manifest.model.Manifest`
and returns :class:`CompactionSpec` values; it does no I/O and keeps no
state, so it is tested on LSM shapes written in a small DSL
(:func:`parse_shape`) and can be replaced without touching the executor.

The policy is size-tiered (SlateDB's and RocksDB's "universal" compaction),
with three rules, tried in this order:

1. **Space amplification.** When the bytes above the oldest sorted run (every
   L0 SST and every newer run) exceed ``max_space_amplification`` times the
   oldest run, merge everything into one bottom run. This is what brings a
   database whose data is mostly overwritten back to about its live size once
   writes stop: without it, up to ``min_l0_ssts - 1`` L0 SSTs and several runs
   holding old versions could stay forever.
2. **L0.** At ``min_l0_ssts`` L0 SSTs or more, merge all of them into a new
   sorted run placed above every existing run (L0 data is newer than any run).
3. **Similar runs.** Merge ``min_merge_runs`` to ``max_sources`` consecutive
   runs when the largest is at most ``size_ratio`` times the smallest; the
   merged run takes their place.

Specs returned together never share a source, so they may run at once.
Run ids come from ``next_run_id`` (the commit re-checks them).

A spec is ``bottom`` when no sorted run lies below its sources; only then may
the merge drop tombstones (nothing older can reappear from under them).

**Clones.** A clone's SSTs inherited from its parents (``SstInfo.db != 0``) are
not its own writes, and rewriting them copies the parent. So the rules count
only the clone's own data: rule 1 weighs the clone's own bytes above the
oldest run, rule 2 counts the clone's own L0 SSTs (when it fires, the
inherited L0 SSTs, which are older, are merged too: L0 order demands it), and
rule 3 never merges a window of inherited runs only. A fresh clone opened and
written once therefore compacts nothing; inherited data is rewritten as the
clone's own writes grow by the same rules as any database's. For a database
that is not a clone every SST is its own and nothing changes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..manifest.model import Manifest, SortedRun, SstInfo, Tree
from ..settings import CompactorOptions


@dataclass(frozen=True, slots=True)
class CompactionSpec:
    """One compaction: its sources, destination run and whether it is the bottom.

    ``l0`` lists L0 SSTs newest first and is always the *oldest* part of the
    tree's L0 list (a suffix); ``runs`` are consecutive sorted runs, newest
    first. With both, ``runs`` starts at the newest run. Everything the
    executor needs is in the spec, so it can be shipped to another process
    (e.g. a Spark task) and executed without reading the manifest.
    """

    tree: str
    l0: tuple[SstInfo, ...]
    runs: tuple[SortedRun, ...]
    dest_run_id: int
    bottom: bool
    reason: str = ""
    history_floor: int | None = None
    """Keep every version newer than this sequence number (``shaledb.engine.history``); None: newest only."""
    range_dels_keep_above: int | None = None
    """Data tree at the bottom: keep range tombstones newer than this (an indexed database's
    index terms not yet cleaned, ``compaction/index_rdels.py``); None: drop them all."""
    data_range_dels: tuple[SstInfo, ...] = ()
    """Index tree: data SSTs whose range tombstones delete index terms (``index_rdels.py``)."""
    below: tuple[SortedRun, ...] = ()
    """Data tree above the bottom: the runs older than the sources, newest first, where
    hot merges find their base (``compaction/merge_bases.py``)."""
    cleans_to: int | None = None
    """Index tree: the commit records the index clean of data range tombstones up to this seq."""

    @property
    def l0_ids(self) -> tuple[str, ...]:
        return tuple(s.id for s in self.l0)

    @property
    def run_ids(self) -> tuple[int, ...]:
        return tuple(r.id for r in self.runs)

    @property
    def ssts(self) -> tuple[SstInfo, ...]:
        """Every source SST (L0 first, then the runs', newest first)."""
        return (*self.l0, *(s for r in self.runs for s in r.ssts))

    @property
    def input_bytes(self) -> int:
        return sum(s.size for s in self.ssts)

    def sources(self) -> list[tuple[SstInfo, ...]]:
        """Sources newest first: each L0 SST alone, then each run's SSTs."""
        return [(s,) for s in self.l0] + [r.ssts for r in self.runs]

    def describe(self) -> str:
        parts = []
        if self.l0:
            parts.append(f"{len(self.l0)} L0")
        if self.runs:
            parts.append("runs " + ",".join(str(r) for r in self.run_ids))
        dest = f"run {self.dest_run_id}{' (bottom)' if self.bottom else ''}"
        return f"{self.tree}: {' + '.join(parts)} -> {dest} [{self.reason}]"


def schedule(manifest: Manifest, options: CompactorOptions, tree: str = "data") -> list[CompactionSpec]:
    """Compactions worth running now on ``tree`` (see module docstring)."""
    t = manifest.tree(tree)
    next_id = manifest.next_run_id
    runs = t.runs
    if not t.l0 and len(runs) < 2:
        return []
    amp = options.max_space_amplification
    if amp is not None and runs:
        bottom_size = runs[-1].size
        above = sum(s.size for s in t.l0 if not s.db) + sum(_own_bytes(r) for r in runs[:-1])
        if above > amp * max(bottom_size, 1):
            return [CompactionSpec(tree, t.l0, runs, next_id, True, "space amplification")]
    specs: list[CompactionSpec] = []
    own_l0 = sum(1 for s in t.l0 if not s.db)  # a clone's inherited L0 SSTs do not count
    if own_l0 >= options.min_l0_ssts:
        specs.append(CompactionSpec(tree, t.l0, (), next_id, not runs, f"{len(t.l0)} L0 SSTs"))
        next_id += 1
    specs.extend(_similar_runs(tree, runs, options, next_id))
    return specs


def _similar_runs(
    tree: str, runs: tuple[SortedRun, ...], options: CompactorOptions, next_id: int
) -> list[CompactionSpec]:
    """Windows of consecutive runs of similar size, newest first, not overlapping."""
    out: list[CompactionSpec] = []
    i = 0
    n = len(runs)
    while i < n:
        lo = hi = max(runs[i].size, 1)
        j = i + 1
        while j < n and j - i < options.max_sources:
            s = max(runs[j].size, 1)
            if max(hi, s) > options.size_ratio * min(lo, s):
                break
            lo, hi = min(lo, s), max(hi, s)
            j += 1
        if j - i >= options.min_merge_runs and any(not s.db for r in runs[i:j] for s in r.ssts):
            window = runs[i:j]
            out.append(CompactionSpec(tree, (), window, next_id, j == n, f"{len(window)} similar runs"))
            next_id += 1
            i = j
        else:
            i += 1
    return out


def _own_bytes(run: SortedRun) -> int:
    """Bytes of ``run`` written by this database (not inherited from a clone's parent)."""
    return sum(s.size for s in run.ssts if not s.db)


# ------------------------------------------------------------- shape DSL


@dataclass
class _ShapeIds:
    next_sst: int = 0
    ids: list[str] = field(default_factory=list)

    def sst(self, size: int, first: bytes = b"a", last: bytes = b"z") -> SstInfo:
        n = self.next_sst
        self.next_sst += 1
        sid = f"0{n:025d}"  # a syntactically valid ULID, ordered by creation
        return SstInfo(id=sid, size=size, first_key=first, last_key=last, entries=1, min_seq=n, max_seq=n)


def parse_shape(text: str) -> Manifest:
    """A manifest from an LSM shape such as ``"L0: 10 10 10 | runs: 400 100x2"``.

    ``L0:`` lists L0 SST sizes newest first; ``runs:`` lists sorted-run sizes
    newest first, each run one SST, or ``SIZExN`` for a run of N SSTs of SIZE
    bytes each. Run ids count from 1, oldest run first (as compaction would
    have numbered them); ``next_run_id`` follows the highest.
    """
    ids = _ShapeIds()
    l0: list[SstInfo] = []
    runs_spec: list[tuple[int, int]] = []
    for part in text.split("|"):
        part = part.strip()
        if not part:
            continue
        name, _, rest = part.partition(":")
        items = rest.split()
        if name.strip() == "L0":
            l0 = [ids.sst(int(x)) for x in items]
        elif name.strip() == "runs":
            for x in items:
                m = re.fullmatch(r"(\d+)(?:x(\d+))?", x)
                if m is None:
                    raise ValueError(f"bad run {x!r} in shape {text!r}")
                runs_spec.append((int(m.group(1)), int(m.group(2) or 1)))
        else:
            raise ValueError(f"unknown part {name!r} in shape {text!r}")
    runs = []
    n = len(runs_spec)
    for pos, (size, count) in enumerate(runs_spec):
        ssts = tuple(ids.sst(size, bytes([0x61 + k]), bytes([0x61 + k]) + b"\xff") for k in range(count))
        runs.append(SortedRun(n - pos, ssts))
    return Manifest(id=1, data=Tree(tuple(l0), tuple(runs)), next_run_id=n + 1)


def format_shape(manifest: Manifest, tree: str = "data") -> str:
    """The inverse of :func:`parse_shape` (sizes only; for test messages and logs)."""
    t: Tree = manifest.tree(tree)
    l0 = " ".join(str(s.size) for s in t.l0)
    runs = " ".join(
        str(r.ssts[0].size) if len(r.ssts) == 1 else f"{r.ssts[0].size}x{len(r.ssts)}" for r in t.runs
    )
    return f"L0: {l0} | runs: {runs}".replace("L0:  |", "L0: |")


__all__ = ["CompactionSpec", "format_shape", "parse_shape", "schedule"]
