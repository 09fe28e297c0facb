"""Writer metrics (issue 32 item 3): counted where the work happens, read as Db.metrics(),
exported through prometheus_client and scraped over HTTP, and the CLI's stats."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from shaledb import Db, FencedError, Settings, WriteBatch
from shaledb.clock import SYSTEM_CLOCK
from shaledb.errors import Unavailable
from shaledb.settings import RetryOptions
from shaledb.store import LatencyStore, open_store
from shaledb.store.metrics import Histogram, PrometheusCollector
from shaledb.testing import FaultInjectingStore

QUIET = Settings(compactor=None, garbage_collector=None)
EXE = Path(sys.executable).with_name("shaledb")
BASE = [str(EXE)] if EXE.exists() else [sys.executable, "-m", "shaledb.cli"]


def test_histogram_buckets_are_cumulative() -> None:
    h = Histogram((0.01, 0.1))
    for v in (0.005, 0.01, 0.05, 3.0):
        h.observe(v)
    snap = h.snapshot()
    assert snap["buckets"] == [[0.01, 2], [0.1, 3], [float("inf"), 4]]
    assert snap["count"] == 4 and snap["sum"] == pytest.approx(3.065)


def test_metrics_count_the_work(mem_url: str) -> None:
    with Db.open(mem_url, settings=QUIET) as db:
        base = db.metrics()
        for i in range(10):
            db.put(b"k%d" % i, b"v" * 10)
        db.write(WriteBatch().put(b"a", b"12345").delete(b"k0"))
        db.get(b"k1")
        db.get(b"zz")
        db.get_many([b"k2", b"k3", b"zz"])  # three keys looked up: were not counted at all
        list(db.scan())
        db.flush(memtable=True)
        m = db.metrics()
    assert m["puts_total"] - base["puts_total"] == 12  # every key written, deletes included
    assert m["put_bytes_total"] - base["put_bytes_total"] == 10 * 12 + 6 + 2
    assert (m["gets_total"], m["scans_total"]) == (5, 1)
    assert m["wal_objects_total"] - base["wal_objects_total"] == 11  # durable writes, one object each
    assert m["wal_bytes_total"] > 0
    assert m["flush_seconds"]["count"] == 1 and m["l0_ssts"] == 1
    assert m["store_requests_total"]["put_create"] >= 11
    assert m["store_request_seconds"]["put_create"]["count"] == m["store_requests_total"]["put_create"]
    assert m["fenced_total"] == 0 and m["write_stalls_total"] == 0


def test_store_retries_and_failed_calls_are_counted(mem_url: str) -> None:
    """store_errors_total counts failed attempts: a blip the retries absorbed and an outage that
    failed the writer's calls looked alike, and nothing counted the retries. Now
    store_retries_total and store_calls_failed_total tell them apart."""
    faults = FaultInjectingStore(open_store(mem_url), seed=41)
    fast = RetryOptions(max_attempts=3, initial_backoff_s=0.001, max_backoff_s=0.001)
    db = Db.open(store=faults, settings=QUIET.replace(retry=fast))
    base = db.metrics()
    faults.add_rule("fail_before", ops="put_create", times=2)
    db.put(b"a", b"1")  # two failed attempts, absorbed
    m = db.metrics()
    assert m["store_retries_total"] - base["store_retries_total"] == 2
    assert m["store_errors_total"]["put_create"] - base["store_errors_total"]["put_create"] == 2
    assert m["store_calls_failed_total"] == base["store_calls_failed_total"] == 0
    faults.add_rule("fail_before", ops="put_create")
    with pytest.raises(Unavailable):
        db.put(b"b", b"2")  # three attempts, then the call fails for good
    m = db.metrics()
    assert m["store_retries_total"] - base["store_retries_total"] == 4
    assert m["store_calls_failed_total"] == 1
    assert (base["stopped"], m["stopped"]) == (0, 1)  # the writer stopped: reopen it
    faults.clear_rules()
    db.close()


def test_puts_total_counts_accepted_writes_and_says_so(mem_url: str) -> None:
    """A durable put whose WAL write failed for good is counted in puts_total (it is counted
    when applied, before the WAL write: one increment on the hot path). An operator compared
    it with the writes acknowledged during an outage (211 vs 210); the HELP text now says
    what it counts."""
    faults = FaultInjectingStore(open_store(mem_url), seed=42)
    fast = RetryOptions(max_attempts=2, initial_backoff_s=0.001, max_backoff_s=0.001)
    db = Db.open(store=faults, settings=QUIET.replace(retry=fast))
    base = db.metrics()["puts_total"]
    db.put(b"a", b"1")
    faults.add_rule("fail_before", ops="put_create")
    with pytest.raises(Unavailable):
        db.put(b"b", b"2")
    assert db.metrics()["puts_total"] - base == 2  # one acknowledged, one accepted then failed
    faults.clear_rules()
    db.close()
    from shaledb.store.metrics import HELP

    assert "accepted" in HELP["puts_total"] and "failed" in HELP["puts_total"], HELP["puts_total"]


def test_fencing_and_write_stalls_are_counted(mem_url: str) -> None:
    slow = LatencyStore(open_store(mem_url), SYSTEM_CLOCK, 0.01)
    tight = QUIET.replace(
        l0_sst_size_bytes=4096, max_unflushed_bytes=4096, wal_max_bytes=1024, l0_max_ssts=1000
    )
    old = Db.open(store=slow, settings=tight)
    for i in range(300):
        old.put(b"k%04d" % i, b"v" * 100, durable=False)
    assert old.metrics()["write_stalls_total"] > 0
    assert old.metrics()["write_stall_seconds"]["count"] > 0
    with Db.open(mem_url, settings=QUIET), pytest.raises(FencedError):
        for i in range(100):
            old.put(b"x%d" % i, b"v")
    assert old.metrics()["fenced_total"] == 1
    old.close()


def test_transactions_are_counted(mem_url: str) -> None:
    # Transactions had no metrics: commits, conflicts and rollbacks are counted now,
    # and exported like every other counter.
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from shaledb import TransactionConflict

    with Db.open(mem_url, settings=QUIET) as db:
        m = db.metrics()
        assert (m["txn_commits_total"], m["txn_conflicts_total"], m["txn_rollbacks_total"]) == (0, 0, 0)
        with db.transaction() as txn:
            txn.put(b"a", b"1")
        with db.transaction("serializable") as txn:  # read-only: a commit too
            txn.get(b"a")
        loser = db.transaction()
        loser.put(b"a", b"2")
        with db.transaction() as txn:
            txn.put(b"a", b"3")
        with pytest.raises(TransactionConflict):
            loser.commit()
        loser.rollback()  # finished already: not a rollback
        with pytest.raises(RuntimeError), db.transaction() as txn:
            txn.put(b"b", b"1")
            raise RuntimeError("leave the block")
        txn = db.transaction()
        txn.put(b"c", b"1")
        txn.rollback()
        txn.rollback()  # once
        m = db.metrics()
        assert (m["txn_commits_total"], m["txn_conflicts_total"], m["txn_rollbacks_total"]) == (3, 1, 2)
        assert db.get(b"a") == b"3" and db.get(b"b") is None and db.get(b"c") is None
        registry = CollectorRegistry()
        registry.register(PrometheusCollector(db))
        text = generate_latest(registry).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name, n in (("txn_commits", 3), ("txn_conflicts", 1), ("txn_rollbacks", 2)):
        fam = families[f"shaledb_{name}"]
        assert fam.type == "counter" and [s.value for s in fam.samples if s.name.endswith("_total")] == [n]


def test_prometheus_scrape(mem_url: str) -> None:
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.parser import text_string_to_metric_families

    with Db.open(mem_url, settings=QUIET) as db:
        for i in range(5):
            db.put(b"k%d" % i, b"v")
        db.get(b"k1")
        db.flush(memtable=True)
        registry = CollectorRegistry()
        registry.register(PrometheusCollector(db, labels={"db": "test"}))
        server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
        try:
            url = f"http://127.0.0.1:{server.server_port}/metrics"
            with urllib.request.urlopen(url, timeout=10) as resp:
                text = resp.read().decode()
        finally:
            server.shutdown()
            thread.join(10)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for fam in families.values():
        for s in fam.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    assert families["shaledb_puts"].type == "counter"
    assert samples[("shaledb_puts_total", (("db", "test"),))] == 5
    assert samples[("shaledb_gets_total", (("db", "test"),))] == 1
    assert samples[("shaledb_l0_ssts", (("db", "test"),))] == 1
    assert families["shaledb_flush_seconds"].type == "histogram"
    assert samples[("shaledb_flush_seconds_count", (("db", "test"),))] == 1
    assert samples[("shaledb_store_requests_total", (("db", "test"), ("kind", "put_create")))] >= 5
    assert samples[("shaledb_store_request_seconds_count", (("db", "test"), ("kind", "put_create")))] >= 5
    # Each family says what it counts (HELP was the metric's own name again: "shaledb gets_total").
    undescribed = [
        f.name
        for f in families.values()
        if f.name.startswith("shaledb_") and f.documentation.startswith("shaledb")
    ]
    assert not undescribed, undescribed
    assert families["shaledb_gets"].documentation == "keys looked up (get and get_many)"


def test_reader_metrics_and_scrape(tmp_path: Path) -> None:
    """A reader in another process is monitored like the writer: its reads, cache, the version
    it follows, its store requests and its disk cache (the only place that cache shows)."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from shaledb import DbReader, DbReaderOptions

    url = str(tmp_path / "db")
    with Db.open(url, settings=QUIET) as db:
        for i in range(20):
            db.put(b"k%02d" % i, b"v" * 10, durable=False)
        db.flush(memtable=True)
        db.put(b"late", b"x")
        opts = DbReaderOptions(disk_cache_dir=str(tmp_path / "cache"), background_poll=False)
        with DbReader.open(url, options=opts) as reader:
            assert reader.get(b"k03") == b"v" * 10
            assert reader.get(b"late") == b"x"
            assert len(list(reader.scan(prefix=b"k1"))) == 10
            assert reader.get_many([b"k01", b"k02"]) == [b"v" * 10] * 2
            m = reader.metrics()
            assert (m["gets_total"], m["scans_total"]) == (4, 1)
            assert m["l0_ssts"] == 1 and m["seq"] == 21 and m["memtables"] == 1
            assert m["wal_objects_replayed_total"] >= 1
            requests = m["store_requests_total"]
            assert isinstance(requests, dict) and requests["get"] >= 1
            assert m["disk_cache_misses_total"] == 1 and m["disk_cache_bytes"] > 0
            registry = CollectorRegistry()
            registry.register(PrometheusCollector(reader, labels={"db": "r"}))
            text = generate_latest(registry).decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }
    assert samples[("shaledb_gets_total", (("db", "r"),))] == 4
    families = list(text_string_to_metric_families(text))
    undescribed = [
        f.name for f in families if f.name.startswith("shaledb_") and f.documentation.startswith("shaledb")
    ]
    assert not undescribed, undescribed  # a reader's own figures (polls, disk cache) too
    assert samples[("shaledb_seq", (("db", "r"),))] == 21


def test_cli_stats_human_and_json(tmp_path: Path) -> None:
    url = str(tmp_path / "db")
    with Db.open(url, settings=QUIET) as db:
        for i in range(50):
            db.put(b"k%02d" % i, b"v", durable=False)
    p = subprocess.run(
        [*BASE, "--json", "--path", url, "stats"], capture_output=True, text=True, timeout=120, check=False
    )
    assert p.returncode == 0, p.stderr
    data: dict[str, Any] = json.loads(p.stdout)
    assert data["seq"] == 50 and data["l0_ssts"] == 1 and data["entries"] == 50
    assert data["wal_objects"] >= 2  # the writer's fence and its writes (kept until GC)
    p = subprocess.run(
        [*BASE, "--path", url, "stats"], capture_output=True, text=True, timeout=120, check=False
    )
    assert p.returncode == 0 and "l0_ssts" in p.stdout and "sst_bytes" in p.stdout
