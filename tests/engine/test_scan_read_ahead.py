"""Scans keep the next chunks of an SST in flight ahead of their cursor (``engine.scan_ahead``).

On a store that counts the GETs it serves at once (each held a few milliseconds,
like a round trip): a long scan has several in flight, never more than
``scan_read_ahead_max_in_flight``, and returns exactly the rows of a model; a scan
that stays in its first chunk reads nothing more; closing a scan early bounds what
it fetched beyond its cursor; a failed read-ahead GET is raised by the scan that
reaches it, and the scan works again after it. Scans starting cold in two chunks of
a small SST warm the rest of it in parallel.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

from shaledb import Db, DbReader, Settings
from shaledb.bulk.ingest import ingest_columns
from shaledb.errors import InvalidArgument, Unavailable
from shaledb.settings import DbReaderOptions, RetryOptions
from shaledb.store import drop_memory_store, open_store
from shaledb.store.wrappers import PerCallStore
from shaledb.testing.seeds import test_seed

T = TypeVar("T")

CHUNK = 64 * 1024
N = 20_000
QUIET = Settings(
    compactor=None,
    garbage_collector=None,
    sst_read_ahead_bytes=CHUNK,
    scan_read_ahead_max_bytes=8 * CHUNK,
    scan_read_ahead_max_in_flight=3,
    scan_warm_sst_max_bytes=0,
    retry=RetryOptions(max_attempts=1, initial_backoff_s=0.001, max_backoff_s=0.001, timeout_s=30.0),
)


def key(i: int) -> bytes:
    return b"key%07d" % i


def value(i: int) -> bytes:
    return b"%07d" % i * 6


class Gauge(PerCallStore):
    """Counts the ranged GETs of SSTs and the most of them served at once; each
    is held ``delay_s`` (a round trip)."""

    def __init__(self, inner: object, delay_s: float = 0.005) -> None:
        super().__init__(inner)  # type: ignore[arg-type]
        self.delay_s = delay_s
        self.lock = threading.Lock()
        self.now = self.most = self.gets = 0

    def _call(self, kind: str, fn: Callable[[], T], requests: int = 1) -> T:
        if kind != "get_range":
            return fn()
        with self.lock:
            self.gets += 1
            self.now += 1
            self.most = max(self.most, self.now)
        try:
            time.sleep(self.delay_s)
            return fn()
        finally:
            with self.lock:
                self.now -= 1

    def reset(self) -> None:
        with self.lock:
            self.most = self.gets = 0


@pytest.fixture
def url() -> Iterator[str]:
    name = f"memory://scan-ahead-{uuid.uuid4().hex}"
    ingest_columns(name, [key(i) for i in range(N)], [value(i) for i in range(N)])  # one SST, ~22 chunks
    yield name
    drop_memory_store(name)


def _chunks(db: Db) -> int:
    (info,) = db._view.runs[0].ssts
    r = db.tables.reader(info)
    return -(-r.data_end // CHUNK)


def test_a_long_scan_keeps_chunks_in_flight_and_returns_the_models_rows(url: str) -> None:
    seed = test_seed()
    rng = random.Random(seed)
    model = {key(i): value(i) for i in range(N)}
    for reverse in (False, True):
        for merged in (False, True):
            gauge = Gauge(open_store(url))
            with Db.open(store=gauge, settings=QUIET) as db:
                chunks = _chunks(db)
                assert chunks >= 16
                mine = model  # (what a run writes stays: the next run's handle finds it)
                if merged:  # memtable rows over the SST: the merged scan path reads it row by row
                    for i in rng.sample(range(N), 50):
                        mine[key(i)] = db_value = b"new %d" % i
                        db.put(key(i), db_value, durable=False)
                    for i in rng.sample(range(N), 50):
                        mine.pop(key(i), None)
                        db.delete(key(i), durable=False)
                gauge.reset()
                got = list(db.scan(reverse=reverse))
                want = sorted(mine.items(), reverse=reverse)
                assert got == want
                print(f"reverse={reverse} merged={merged}: {gauge.gets} GETs, at most {gauge.most} at once")
                assert 2 <= gauge.most <= QUIET.scan_read_ahead_max_in_flight
                assert gauge.gets <= chunks + 1  # a chunk each, the blocks across their edges included
                lo, hi = sorted(rng.sample(range(N), 2))
                limit = rng.choice([None, rng.randrange(1, 5000)])
                got = list(db.scan(key(lo), key(hi), reverse=reverse, limit=limit))
                want = [kv for kv in want if key(lo) <= kv[0] < key(hi)][:limit]
                assert got == want, (lo, hi, limit)


def test_without_read_ahead_each_chunk_and_each_edge_block_is_one_get_in_turn(url: str) -> None:
    gauge = Gauge(open_store(url), delay_s=0)
    with Db.open(store=gauge, settings=QUIET.replace(scan_read_ahead_max_bytes=0)) as db:
        chunks = _chunks(db)
        gauge.reset()
        assert sum(1 for _ in db.scan()) == N
        assert gauge.most == 1
        assert gauge.gets > 1.5 * chunks  # blocks straddling two chunks are read on their own


def test_a_scan_within_its_first_chunk_reads_nothing_more(url: str) -> None:
    gauge = Gauge(open_store(url), delay_s=0)
    with Db.open(store=gauge, settings=QUIET) as db:
        for start in (0, 5000, N - 300):
            gauge.reset()
            rows = list(db.scan(key(start), limit=100))
            assert rows == [(key(i), value(i)) for i in range(start, start + 100)]
            time.sleep(0.05)  # anything fetched behind the scan's back would show now
            assert gauge.gets == 1, start


def test_an_end_key_bounds_the_read_ahead(url: str) -> None:
    gauge = Gauge(open_store(url))
    with Db.open(store=gauge, settings=QUIET) as db:
        gauge.reset()
        rows = list(db.scan(key(0), key(3000)))  # about 3 chunks
        time.sleep(0.05)
        assert len(rows) == 3000
        assert gauge.gets <= 4


@pytest.mark.parametrize("reverse", [False, True])
def test_a_limit_bounds_the_read_ahead(url: str, reverse: bool) -> None:
    gauge = Gauge(open_store(url))
    with Db.open(store=gauge, settings=QUIET) as db:
        gauge.reset()
        rows = list(db.scan(limit=1000, reverse=reverse))  # 69 KB: the chunk it starts in and the next
        time.sleep(0.05)
        assert len(rows) == 1000
        assert gauge.gets == (3 if reverse else 2)  # (in reverse the first is the SST's short last chunk)
        gauge.reset()
        want = [(key(i), value(i)) for i in range(N)]
        if reverse:
            want.reverse()
        assert list(db.scan(limit=N // 2, reverse=reverse)) == want[: N // 2]


def test_closing_a_scan_early_cancels_what_it_fetched_ahead(url: str) -> None:
    gauge = Gauge(open_store(url), delay_s=0.02)
    with Db.open(store=gauge, settings=QUIET.replace(scan_read_ahead_max_in_flight=2)) as db:
        gauge.reset()
        scan = db.scan()
        it = iter(scan)
        for _ in range(4000):  # into the 4th chunk or so: the window has grown
            next(it)
        entered = gauge.gets
        scan.close()
        time.sleep(0.1)  # a GET still queued would have run by now
        assert gauge.gets <= entered + 2, (entered, gauge.gets)
        # and after a scan dropped mid-way without close: the same bound
        gauge.reset()
        scan = db.scan(key(10_000))
        it = iter(scan)
        for _ in range(3000):
            next(it)
        entered = gauge.gets
        del it, scan
        time.sleep(0.1)
        assert gauge.gets <= entered + 2, (entered, gauge.gets)


class FailInThePool(PerCallStore):
    """Fails the ``nth`` ranged GET made by a read-ahead thread (``shaledb-scan``), once."""

    def __init__(self, inner: object, nth: int) -> None:
        super().__init__(inner)  # type: ignore[arg-type]
        self.nth = nth
        self.seen = 0
        self.failed: tuple[int, int] | None = None
        self.lock = threading.Lock()

    def get_range(self, path: str, start: int, end: int) -> bytes:
        if threading.current_thread().name.startswith("shaledb-scan"):
            with self.lock:
                self.seen += 1
                fail = self.seen == self.nth
                if fail:
                    self.failed = (start, end)
            if fail:
                raise Unavailable(f"injected: read-ahead GET [{start}, {end}) of {path}")
        return super().get_range(path, start, end)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("nth", [1, 3])
def test_a_failed_read_ahead_get_is_raised_by_the_scan_and_a_retry_works(
    url: str, reverse: bool, nth: int
) -> None:
    faults = FailInThePool(open_store(url), nth)
    gauge = Gauge(faults, delay_s=0.002)
    with Db.open(store=gauge, settings=QUIET) as db:
        chunks = _chunks(db)
        seen: list[bytes] = []
        with pytest.raises(Unavailable, match="injected: read-ahead GET"):
            for k, _ in db.scan(reverse=reverse):
                seen.append(k)
        assert faults.failed is not None
        want = [key(i) for i in range(N)]
        if reverse:
            want.reverse()
        assert 0 < len(seen) < N and seen == want[: len(seen)]  # rows up to the failed chunk, in order
        assert [k for k, _ in db.scan(reverse=reverse)] == want  # the retry: the chunk read again
        assert gauge.gets <= 3 * chunks


class Ticks:
    """A clock for timing cold reads: each reading ``step_s`` later than the one before."""

    def __init__(self, step_s: float) -> None:
        self.step_s = step_s
        self.t = 0.0

    def __call__(self) -> float:
        self.t += self.step_s
        return self.t


@pytest.mark.parametrize("step_s", [0.02, 0.0007])
def test_scans_starting_cold_in_two_chunks_warm_the_rest_in_parallel(url: str, step_s: float) -> None:
    """Cold reads of 20 ms (an object store's round trip) or of 0.7 ms (a local directory's
    1 MiB read into fresh memory: the scan tail of issue 30) warm the SST."""
    gauge = Gauge(open_store(url))
    settings = QUIET.replace(scan_warm_sst_max_bytes=4 << 20)
    with Db.open(store=gauge, settings=settings) as db:
        db.tables.ahead.now = Ticks(step_s)  # each cold read takes this long
        chunks = _chunks(db)
        gauge.reset()
        assert next(iter(db.scan(key(100), limit=10))) == (key(100), value(100))
        assert gauge.gets == 1 and db.tables.ahead.warm_ups == 0
        assert next(iter(db.scan(key(15_000), limit=10))) == (key(15_000), value(15_000))  # a second chunk
        assert db.tables.ahead.warm_ups == 1
        for i in range(0, N, 997):  # every chunk: waits for the warm-up's GETs at most
            assert next(iter(db.scan(key(i), limit=1))) == (key(i), value(i))
        time.sleep(0.05)
        assert gauge.gets <= chunks + 1
        assert gauge.most > 3  # the warm-up's GETs went out together
        before = gauge.gets
        assert list(db.scan()) == [(key(i), value(i)) for i in range(N)]  # all cached now
        assert gauge.gets == before


@pytest.mark.parametrize(
    ("changes", "step_s"),
    [
        ({"scan_warm_sst_max_bytes": 0}, 0.02),  # off
        ({"scan_warm_sst_max_bytes": 256 * 1024}, 0.02),  # the SST is larger
        ({"scan_warm_sst_max_bytes": 4 << 20, "block_cache_bytes": 2 << 20}, 0.02),  # over half the cache
        ({"scan_warm_sst_max_bytes": 4 << 20}, 0.0001),  # reads from memory in place: hardly waited
    ],
)
def test_no_warm_up_when_off_the_sst_is_too_large_or_reads_are_fast(
    url: str, changes: dict[str, int], step_s: float
) -> None:
    gauge = Gauge(open_store(url), delay_s=0)
    with Db.open(store=gauge, settings=QUIET.replace(**changes)) as db:
        db.tables.ahead.now = Ticks(step_s)
        gauge.reset()
        for i in (100, 15_000, 8_000, 3_000):
            assert next(iter(db.scan(key(i), limit=1))) == (key(i), value(i))
        time.sleep(0.05)
        assert db.tables.ahead.warm_ups == 0
        assert gauge.gets == 4


def test_a_reader_reads_ahead_too(url: str) -> None:
    gauge = Gauge(open_store(url))
    opts = DbReaderOptions(
        background_poll=False,
        establish_checkpoint=False,
        sst_read_ahead_bytes=CHUNK,
        scan_read_ahead_max_in_flight=3,
        scan_warm_sst_max_bytes=0,
    )
    with DbReader.open(store=gauge, options=opts) as r:
        gauge.reset()
        assert sum(1 for _ in r.scan()) == N
        assert 2 <= gauge.most <= 3


@pytest.mark.parametrize(
    ("name", "bad"),
    [
        ("scan_read_ahead_max_bytes", -1),
        ("scan_read_ahead_max_bytes", 1.5),
        ("scan_read_ahead_max_in_flight", 0),
        ("scan_read_ahead_max_in_flight", 65),
        ("scan_read_ahead_max_in_flight", True),
        ("scan_warm_sst_max_bytes", -1),
        ("scan_warm_sst_max_bytes", "8MiB"),
    ],
)
def test_bad_read_ahead_options_are_refused(name: str, bad: object) -> None:
    with pytest.raises(InvalidArgument, match=name):
        Settings(**{name: bad})  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match=name):
        DbReaderOptions(**{name: bad})  # type: ignore[arg-type]
