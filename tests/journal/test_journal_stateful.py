"""Model-based test of the value journal: random operations against a rich model.

The writer runs with key/value separation on (values of 64 bytes or more live
in the journal) and tiny settings, so WAL objects, L0 flushes, journal files,
pointers and multi-block SSTs appear within a few steps. Rules:

* writes: put (optionally with metadata, a TTL and index terms for fields
  ``f``/``g``, whose edge-case terms include NUL and 0xFF), delete, and
  batches mixing them (including two writes of one key);
* reads, checked against the model: get, head (size, metadata, expiry,
  terms), scan, scan_heads, fold_keys, fold_objects in key and in sequence
  order (sequence numbers equal to the heads'), index_query (ranges,
  return_terms, start_key pagination, regex, limit), a DbReader;
* time: the injected clock moves on, so entries expire;
* maintenance: L0 flush, a ledger compaction (a standalone compactor),
  journal compaction by the writer or by a standalone process, garbage
  collection with no minimum age, ledger rebuild (under ``retain``), clean
  reopen, and crash (the fault-injecting store stops every call; a new
  writer opens on the inner store: every acknowledged write survives);
* snapshots: opened at any point, read after any of the above (including
  journal compaction and GC): they must keep returning the model as it was
  when they were taken, values included;
* an armed crash that fires at the n-th store call from now, in whichever
  thread makes it (a WAL write, an L0 flush, a journal compaction's rewrite,
  repoint or commit, a rebuild, a close or an open).

The recovery strategy (``retain`` or ``recovr``) and the compression are drawn
per example. Every write is durable, so after a crash the database must hold
exactly the model -- plus, when the crash hit a write before it was
acknowledged, possibly that write (checked on values, heads and index terms).
Budget: ``SHALEDB_JOURNAL_EXAMPLES`` (default 150) examples of
``SHALEDB_JOURNAL_STEPS`` (default 60) steps on the memory store, a tenth of
that on a local directory, and ``SHALEDB_JOURNAL_S3_EXAMPLES`` (default 3; the
longer run used 10) on the moto S3 server, where every step costs requests;
Hypothesis prints the failing steps and the seed everything is derived from.
"""

from __future__ import annotations

import functools
import os
import random
import shutil
import tempfile
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from journal_kit import THRESHOLD, RichModel, collect, journal_settings, wall_clock

from shaledb import Db, DbReader, DbReaderOptions, WriteBatch
from shaledb.compaction import Compactor
from shaledb.errors import ShaleError
from shaledb.journal.compaction import StandaloneHost, compact_journal
from shaledb.settings import CompactorOptions
from shaledb.store import drop_memory_store, open_store
from shaledb.testing import FaultInjectingStore, SimulatedCrash
from shaledb.testing.model import expected_scan
from shaledb.testing.strategies import KEYS, PREFIXES, bounds, keys

Rule = Callable[..., None]


def crashable(fn: Rule) -> Rule:
    """Run a rule; if the store "crashed" under it, recover as a new process would."""

    @functools.wraps(fn)
    def wrapper(self: JournalMachine, *args: Any, **kwargs: Any) -> None:
        try:
            fn(self, *args, **kwargs)
        except BaseException as exc:
            if not self._is_crash(exc):
                raise
            self._recover()
        finally:
            self._maybe = None

    return wrapper


EXAMPLES = int(os.environ.get("SHALEDB_JOURNAL_EXAMPLES", "150"))
STEPS = int(os.environ.get("SHALEDB_JOURNAL_STEPS", "60"))
S3_EXAMPLES = int(os.environ.get("SHALEDB_JOURNAL_S3_EXAMPLES", "3"))

FIELDS = ("f", "g")
TERMS = (b"\x00", b"a", b"a\x00", b"ab", b"b", b"\xff")
TERM_BOUNDS = st.one_of(st.none(), st.sampled_from(TERMS))


SIZES = (0, 1, 24, THRESHOLD - 1, THRESHOLD, 200, 700)
"""Value sizes: small, around the separation threshold, and several blocks' worth."""


def values() -> st.SearchStrategy[bytes]:
    """Values drawn from a seed (not raw bytes: long runs stay within Hypothesis's buffer)."""
    return st.builds(
        lambda n, s: random.Random(s).randbytes(n), st.sampled_from(SIZES), st.integers(0, 2**16)
    )


def term_sets() -> st.SearchStrategy[dict[str, list[bytes]] | None]:
    return st.one_of(
        st.none(),
        st.dictionaries(st.sampled_from(FIELDS), st.lists(st.sampled_from(TERMS), max_size=3), max_size=2),
    )


def rich_puts() -> st.SearchStrategy[tuple[Any, ...]]:
    return st.tuples(
        keys(),
        values(),
        st.one_of(st.none(), st.binary(max_size=8)),
        st.one_of(st.none(), st.sampled_from([1.0, 2.5, 6.0])),
        term_sets(),
    )


class JournalMachine(RuleBasedStateMachine):
    store_kind = "memory"

    def __init__(self) -> None:
        super().__init__()
        self.db: Db | None = None
        self.name = f"journal-stateful-{uuid.uuid4().hex}"
        self.tmpdir: str | None = None
        if self.store_kind == "memory":
            self.inner = open_store(f"memory://{self.name}")
        elif self.store_kind == "s3":
            assert S3Machine.locations is not None, "runs under the moto fixture (TestJournalStatefulS3)"
            self.inner = S3Machine.locations().open()
        else:
            self.tmpdir = tempfile.mkdtemp(prefix="shaledb-journal-")
            self.inner = open_store(os.path.join(self.tmpdir, "db"))
        self.model = RichModel()
        self.snaps: list[tuple[Any, RichModel]] = []
        self._maybe: RichModel | None = None
        self.armed = False

    @initialize(
        seed=st.integers(0, 2**32 - 1),
        strategy=st.sampled_from(["retain", "recovr"]),
        compression=st.sampled_from(["none", "lz4"]),
    )
    def open_first(self, seed: int, strategy: str, compression: str) -> None:
        self.rng = random.Random(seed)
        self.strategy = strategy
        self.clock = wall_clock()
        self.settings = journal_settings(strategy, compression=compression)
        self._open()

    def _open(self) -> None:
        self.faults = FaultInjectingStore(self.inner, seed=self.rng.getrandbits(32))
        self.armed = False
        self.db = Db.open(
            store=self.faults, settings=self.settings, clock=self.clock, seed=self.rng.getrandbits(64)
        )

    def teardown(self) -> None:
        for s, _ in self.snaps:
            s.close()
        if self.db is not None:
            try:
                self.db.close()
            except (ShaleError, SimulatedCrash):
                pass
        drop_memory_store(self.name)
        if self.tmpdir is not None:
            shutil.rmtree(self.tmpdir, ignore_errors=True)

    def now_ms(self) -> int:
        return int(self.clock.now() * 1000)

    # ---------------------------------------------------------------- writes

    def _write(self, new: RichModel, fn: Callable[[], Any]) -> None:
        """Apply a write; the model takes it once it is acknowledged (see ``crashable``)."""
        self._maybe = new
        fn()
        self.model = new

    @rule(op=rich_puts())
    @crashable
    def put(self, op: tuple[Any, ...]) -> None:
        assert self.db is not None
        db = self.db
        key, value, meta, ttl, idx = op
        new = self.model.copy()
        new.put(key, value, self.now_ms(), metadata=meta, ttl_s=ttl, indexes=idx)
        self._write(new, lambda: db.put(key, value, metadata=meta, ttl=ttl, indexes=idx))

    @rule(key=keys(), value=values())
    @crashable
    def plain_put(self, key: bytes, value: bytes) -> None:
        assert self.db is not None
        db = self.db
        new = self.model.copy()
        new.put(key, value, self.now_ms())
        self._write(new, lambda: db.put(key, value))

    @rule(key=keys())
    @crashable
    def delete(self, key: bytes) -> None:
        assert self.db is not None
        db = self.db
        new = self.model.copy()
        new.delete(key)
        self._write(new, lambda: db.delete(key))

    @rule(ops=st.lists(st.one_of(rich_puts(), keys()), min_size=1, max_size=5))
    @crashable
    def batch(self, ops: list[Any]) -> None:
        assert self.db is not None
        db = self.db
        wb = WriteBatch()
        now = self.now_ms()
        new = self.model.copy()
        for op in ops:
            if isinstance(op, bytes):
                wb.delete(op)
                new.delete(op)
            else:
                key, value, meta, ttl, idx = op
                wb.put(key, value, metadata=meta, ttl=ttl, indexes=idx)
                new.put(key, value, now, metadata=meta, ttl_s=ttl, indexes=idx)
        self._write(new, lambda: db.write(wb))

    @rule(seconds=st.sampled_from([0.5, 1.0, 3.0]))
    def advance_clock(self, seconds: float) -> None:
        self.clock.advance(seconds)

    # ----------------------------------------------------------------- reads

    @rule(key=keys())
    @crashable
    def get_and_head(self, key: bytes) -> None:
        assert self.db is not None
        now = self.now_ms()
        rec = self.model.live(now).get(key)
        assert self.db.get(key) == (None if rec is None else rec.value)
        h = self.db.head(key)
        if rec is None:
            assert h is None
            return
        assert h is not None
        assert (h.value_size, h.metadata, dict(h.indexes)) == (len(rec.value), rec.metadata, rec.terms)
        assert h.expires_at == (None if rec.expires_ms is None else rec.expires_ms / 1000)
        assert not h.in_journal or len(rec.value) >= THRESHOLD

    @rule(
        start=bounds(),
        end=bounds(),
        prefix=st.one_of(st.none(), st.sampled_from(PREFIXES)),
        reverse=st.booleans(),
        limit=st.one_of(st.none(), st.integers(0, 5)),
    )
    @crashable
    def scans(
        self, start: bytes | None, end: bytes | None, prefix: bytes | None, reverse: bool, limit: int | None
    ) -> None:
        assert self.db is not None
        items = self.model.items(self.now_ms())
        want = expected_scan(items, start, end, prefix=prefix, reverse=reverse, limit=limit)
        assert list(self.db.scan(start, end, prefix=prefix, reverse=reverse, limit=limit)) == want
        heads = list(self.db.scan_heads(start, end, prefix=prefix, reverse=reverse, limit=limit))
        assert [(k, h.value_size) for k, h in heads] == [(k, len(v)) for k, v in want]
        assert list(self.db.fold_keys(start, end, prefix=prefix, reverse=reverse, limit=limit)) == [
            k for k, _ in want
        ]

    @rule()
    @crashable
    def folds(self) -> None:
        assert self.db is not None
        items = self.model.items(self.now_ms())
        assert list(self.db.fold_objects()) == sorted(items.items())
        by_seq = list(self.db.fold_objects(order="sqn"))
        assert sorted((k, v) for _, k, v in by_seq) == sorted(items.items())
        seqs = [s for s, _, _ in by_seq]
        assert seqs == sorted(seqs), "sequence order"
        heads = dict(self.db.scan_heads())
        for s, k, _ in by_seq:
            assert heads[k].seq == s

    @rule(
        fld=st.sampled_from(FIELDS),
        start=TERM_BOUNDS,
        end=TERM_BOUNDS,
        start_key=st.one_of(st.none(), keys()),
        return_terms=st.booleans(),
        regex=st.one_of(st.none(), st.sampled_from([b"a", b"^b", b"\x00"])),
        limit=st.one_of(st.none(), st.integers(0, 4)),
    )
    @crashable
    def index_query(
        self,
        fld: str,
        start: bytes | None,
        end: bytes | None,
        start_key: bytes | None,
        return_terms: bool,
        regex: bytes | None,
        limit: int | None,
    ) -> None:
        assert self.db is not None
        if start is None:
            start_key = None
        want = self.model.index(fld, self.now_ms(), start, end, start_key=start_key, regex=regex, limit=limit)
        got = self.db.index_query(
            fld, start, end, return_terms=return_terms, start_key=start_key, term_regex=regex, limit=limit
        )
        assert got == (want if return_terms else [k for _, k in want])

    @rule(fld=st.sampled_from(FIELDS))
    @crashable
    def index_pages(self, fld: str) -> None:
        """Paging with limit 2 and ``start_key = last + NUL`` walks the whole field once."""
        assert self.db is not None
        want = self.model.index(fld, self.now_ms())
        got: list[tuple[bytes, bytes]] = []
        page = self.db.index_query(fld, return_terms=True, limit=2)
        while page:
            got += page
            t, k = page[-1]
            page = self.db.index_query(fld, t, None, return_terms=True, start_key=k + b"\x00", limit=2)
        assert got == want

    @rule()
    def reader(self) -> None:
        assert self.db is not None
        now = self.now_ms()
        with DbReader.open(
            store=self.inner,
            options=DbReaderOptions(establish_checkpoint=False, background_poll=False),
            clock=self.clock,
        ) as r:
            assert dict(r.scan()) == self.model.items(now)
            for fld in FIELDS:
                assert r.index_query(fld, return_terms=True) == self.model.index(fld, now)

    # ------------------------------------------------------------- snapshots

    @rule()
    @crashable
    def snapshot_open(self) -> None:
        assert self.db is not None
        if len(self.snaps) >= 3:
            self.snaps.pop(0)[0].close()
        self.snaps.append((self.db.snapshot(), self.model.copy()))

    @rule(pick=st.integers(0, 255), key=keys(), fld=st.sampled_from(FIELDS))
    @crashable
    def snapshot_read(self, pick: int, key: bytes, fld: str) -> None:
        if not self.snaps:
            return
        snap, model = self.snaps[pick % len(self.snaps)]
        now = self.now_ms()
        items = model.items(now)
        assert snap.get(key) == items.get(key)
        assert list(snap.scan()) == sorted(items.items())
        h = snap.head(key)
        assert (h is None) == (key not in items)
        assert snap.index_query(fld, return_terms=True) == model.index(fld, now)
        assert sorted((k, v) for _, k, v in snap.fold_objects(order="sqn")) == sorted(items.items())

    @rule(pick=st.integers(0, 255))
    def snapshot_close(self, pick: int) -> None:
        if self.snaps:
            self.snaps.pop(pick % len(self.snaps))[0].close()

    # ----------------------------------------------------------- maintenance

    @rule()
    @crashable
    def flush_memtable(self) -> None:
        assert self.db is not None
        self.db.flush(memtable=True)

    @rule()
    @crashable
    def compact_ledger(self) -> None:
        assert self.db is not None
        self.db.flush(memtable=True)
        c = Compactor.open(
            store=self.inner,
            options=CompactorOptions(min_l0_ssts=2, min_merge_runs=2, max_sources=4),
            settings=self.settings,
            clock=self.clock,
        )
        c.run_once()
        self.db.refresh_manifest()

    @rule(standalone=st.booleans())
    @crashable
    def compact_journal(self, standalone: bool) -> None:
        assert self.db is not None
        self.db.flush(memtable=True)  # no background flush may add journal files between the runs
        if standalone:
            host = StandaloneHost(
                self.inner,
                settings=self.settings,
                clock=self.clock,
                rng=random.Random(self.rng.getrandbits(64)),
            )
            report = compact_journal(host)
            self.db.refresh_manifest()
        else:
            report = self.db.compact_journal()
        assert not report.busy
        again = self.db.compact_journal()
        assert not again.runs, f"journal compaction did not converge: {again.to_dict()}"

    @rule()
    @crashable
    def gc(self) -> None:
        """GC with no minimum age: first let the writer finish its flushes (an L0 SST
        written but not yet committed is young, and GC only spares young objects)."""
        assert self.db is not None
        self.db.flush(memtable=True)
        collect(self.inner, self.clock)

    @rule()
    @crashable
    def rebuild_ledger(self) -> None:
        assert self.db is not None
        if self.strategy != "retain":
            return
        self.db.rebuild_ledger()

    @rule()
    @crashable
    def reopen(self) -> None:
        assert self.db is not None
        for s, _ in self.snaps:
            s.close()
        self.snaps = []
        self.db.close()
        if self.faults.crashed:  # an armed crash hit a background thread (or the close)
            self._recover()
            return
        self._open()

    @rule()
    def crash(self) -> None:
        self._recover()

    @rule(n=st.integers(1, 40), action=st.sampled_from(["crash", "apply_then_crash"]))
    def arm_crash(self, n: int, action: str) -> None:
        """Crash at the n-th store call from now, whichever thread makes it."""
        if not self.armed:
            self.faults.clear_calls()
            self.faults.add_rule(action, nth=n)  # type: ignore[arg-type]
            self.armed = True

    def _is_crash(self, exc: BaseException) -> bool:
        return isinstance(exc, (SimulatedCrash, ShaleError)) and self.faults.crashed

    def _signature(self, model: RichModel) -> Any:
        now = self.now_ms()
        live = model.live(now)
        heads = {k: (r.value, r.metadata, r.expires_ms, r.terms) for k, r in live.items()}
        return heads, [model.index(f, now) for f in FIELDS]

    def _observed(self) -> Any:
        assert self.db is not None
        heads = {}
        for k, v in self.db.scan():
            h = self.db.head(k)
            assert h is not None
            exp = None if h.expires_at is None else round(h.expires_at * 1000)
            heads[k] = (v, h.metadata, exp, dict(h.indexes))
        return heads, [self.db.index_query(f, return_terms=True) for f in FIELDS]

    def _recover(self) -> None:
        """The writer process died: reopen on the inner store; it must hold the model,
        or the model plus the write that was in flight (``_maybe``)."""
        maybe = self._maybe
        self._maybe = None
        for snap, _ in self.snaps:
            try:
                snap.close()
            except (ShaleError, SimulatedCrash):
                pass
        self.snaps = []
        self.faults.crash()
        if self.db is not None:
            try:
                self.db.close()
            except (ShaleError, SimulatedCrash):
                pass
        self._open()
        got = self._observed()
        if got == self._signature(self.model):
            return
        assert maybe is not None and got == self._signature(maybe), (
            "recovered state is neither the acknowledged one nor it plus the write in flight"
        )
        self.model = maybe

    @invariant()
    @crashable
    def live_reads_match(self) -> None:
        if self.db is None or self.faults.crashed or self.db._host.failed():
            return
        now = self.now_ms()
        items = self.model.items(now)
        for k in KEYS[:4]:
            assert self.db.get(k) == items.get(k)


class LocalDirMachine(JournalMachine):
    store_kind = "local"


class S3Machine(JournalMachine):
    """The same machine on the moto S3 server: S3's conditional puts, listings and errors."""

    store_kind = "s3"
    locations: Callable[[], Any] | None = None  # s3_url_factory, set by _moto_for_machine (conftest)


def _settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        stateful_step_count=STEPS,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
        print_blob=True,
    )


TestJournalStateful = JournalMachine.TestCase
TestJournalStateful.settings = _settings(EXAMPLES)
TestJournalStatefulLocalDir = pytest.mark.slow(LocalDirMachine.TestCase)
TestJournalStatefulLocalDir.settings = _settings(max(1, EXAMPLES // 10))
# A request to moto costs about a millisecond: S3 gets a budget of its own.
TestJournalStatefulS3 = pytest.mark.usefixtures("_moto_for_machine")(pytest.mark.slow(S3Machine.TestCase))
TestJournalStatefulS3.settings = _settings(max(1, S3_EXAMPLES))
