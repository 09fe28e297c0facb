"""Streams across a killed driver, as a user runs them: the query in a process of its own,
SIGKILLed at a random point, then the same query restarted on the same checkpoint location.

* the change feed as a source: the restarted query resumes from its committed offset, and
  every change reaches the (exactly-once) parquet sink once; with the WAL it needs collected
  while it was stopped, it fails naming the cause and the way out, never skipping;
* the shaledb sink: every row lands once (one ingest per micro-batch Spark committed), and
  the killed run's ingest leases and staged runs lapse and are collected as documented.

Randomized: each test prints its seed (``SHALEDB_TEST_SEED`` replays it). A minute or more
each (two Spark drivers per test), so marked ``soak``: ``make soak-spark`` runs them, not
``make test``; the fixes they cover have fast tests in the default run
(``test_spark_changes.py``: a new stream after the collector ran, a collected offset's message).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from spark_kit import contents

from shaledb import Db, GarbageCollector, GcOptions, NotFound, Settings, admin
from shaledb.format import paths
from shaledb.testing.seeds import test_seed

pytestmark = [pytest.mark.spark, pytest.mark.soak]
pytest.importorskip("pyspark")

QUIET = Settings(compactor=None, garbage_collector=None)
ENV = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}

FEED_JOB = """
import json, sys
import shaledb.spark as shale_spark

url, out, ckpt = sys.argv[1:4]
spark = shale_spark.local_session("feed-crash", master="local[2]")
q = (shale_spark.read_changes(spark, url, max_changes_per_trigger=15)
     .writeStream.format("parquet").option("path", out).option("checkpointLocation", ckpt)
     .trigger(availableNow=True).start())
try:
    q.awaitTermination()
except Exception as exc:
    print("FAILED " + json.dumps(str(exc)), flush=True)
    sys.exit(3)
rows = spark.read.parquet(out).select("seq", "batch_index").collect()
print("ROWS " + json.dumps([[r.seq, r.batch_index] for r in rows]), flush=True)
"""


def _kill_when(
    args: list[str], ready: Callable[[], bool], rng: random.Random, seed: int, most_s: float = 1.5
) -> None:
    """Start the job, wait until ``ready()``, then a random 0-``most_s`` s more, and SIGKILL it."""
    job = subprocess.Popen(
        args, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 90
        while not ready():
            if job.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the job ended or made no progress before it was killed (seed {seed})")
            time.sleep(0.005)
        time.sleep(rng.uniform(0, most_s))
    finally:
        _kill_session(job.pid)
        job.wait(60)


def _kill_session(sid: int) -> None:
    """SIGKILL the job and every process of its session, as a crash of the driver's host does.
    Killing the process group is not enough: PySpark's worker daemons put themselves in groups
    of their own, and the one running a stream sink's commit finished it after the JVM died, so
    no run was ever killed inside a commit."""
    os.killpg(sid, signal.SIGKILL)
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone already
        if int(fields[3]) == sid:  # the session id
            try:
                os.kill(int(proc.name), signal.SIGKILL)
            except ProcessLookupError:
                pass


def _commits(ckpt: Path) -> int:
    d = ckpt / "commits"
    return len([p for p in d.iterdir() if p.name.isdigit()]) if d.exists() else 0


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, env=ENV, capture_output=True, text=True, timeout=150, check=False)


def test_a_killed_change_stream_resumes_exactly_once_and_a_collected_cursor_fails_clearly(
    tmp_path: Path,
) -> None:
    seed = test_seed()
    rng = random.Random(seed)
    url, out, ckpt = str(tmp_path / "db"), tmp_path / "out", tmp_path / "ckpt"
    with Db.open(url, settings=QUIET) as db:
        for i in range(105):  # one WAL object each: 7 micro-batches of 15
            db.put(b"k%03d" % rng.randrange(1000), b"v%d" % i)
        want = sorted((c.seq, c.batch_index) for c in db.changes(follow=False).read())
    args = [sys.executable, "-c", FEED_JOB, url, str(out), str(ckpt)]
    stop_after = rng.randrange(1, 4)
    _kill_when(args, lambda: _commits(ckpt) >= stop_after, rng, seed)
    killed_at = _commits(ckpt)
    print(f"killed after {killed_at} committed micro-batches")
    done = _run(args)
    line = [s for s in done.stdout.splitlines() if s.startswith("ROWS ")]
    assert line, (seed, done.stdout[-2000:], done.stderr[-3000:])
    got = sorted(tuple(r) for r in json.loads(line[0][5:]))
    assert got == want, f"seed {seed}: {len(got)} rows, {len(want)} changes"

    # Stopped at the end of the history: new writes reach SSTs and the collector removes
    # their WAL objects before the query runs again. It must fail, not skip them.
    with Db.open(url, settings=QUIET) as db:
        for i in range(10):
            db.put(b"late%d" % i, b"v")
        db.flush(memtable=True)
    with GarbageCollector.open(url, GcOptions(min_age_s=0)) as gc:
        assert gc.run_once().deleted["wal"]
    failed = _run(args)
    assert "FAILED" in failed.stdout, (seed, failed.stdout[-2000:], failed.stderr[-3000:])
    text = failed.stdout
    print(text[:3000])
    assert "CursorExpired" in text and "garbage collector removed" in text, text
    assert "new checkpointLocation" in text and "wal_retention_s" in text, text
    assert "c1." in text.split("cannot be resumed")[0], text  # names the offset it stopped at


SINK_JOB = """
import sys
import shaledb.spark as shale_spark

src, url, ckpt = sys.argv[1:4]
spark = shale_spark.local_session("sink-crash", master="local[2]")
df = spark.readStream.option("maxFilesPerTrigger", 1).schema("key string, value string").json(src)
q = (df.writeStream.format("shaledb").option("checkpointLocation", ckpt).option("lease_s", "3")
     .trigger(availableNow=True).start(url))
q.awaitTermination()
print("done", flush=True)
"""


def _ingests(url: str) -> int:
    try:
        return len(admin.read_manifest(url).ingests)
    except NotFound:
        return 0


def test_a_sink_killed_at_a_random_point_restarts_exactly_once_and_its_leases_lapse(tmp_path: Path) -> None:
    """Killed at a random moment after its first commit (in a micro-batch's tasks, its commit's
    SST writing, between its manifest CAS and Spark's commit log, or idle between them)."""
    seed = test_seed()
    rng = random.Random(seed)
    src, url, ckpt = tmp_path / "in", str(tmp_path / "db"), tmp_path / "ckpt"
    src.mkdir()
    want: dict[bytes, bytes] = {}
    for f in range(8):  # keys repeat across files: a file replayed out of order would show
        rows = {f"k{rng.randrange(120):03d}": f"f{f}-{i}" for i in range(40)}
        (src / f"part-{f}.json").write_text(
            "".join(json.dumps({"key": k, "value": v}) + "\n" for k, v in rows.items())
        )
        os.utime(src / f"part-{f}.json", (1_700_000_000 + f, 1_700_000_000 + f))  # file order = batch order
        want |= {k.encode(): v.encode() for k, v in rows.items()}
    args = [sys.executable, "-c", SINK_JOB, str(src), url, str(ckpt)]
    first = 1 + rng.randrange(3)
    leases = tmp_path / "db" / "compactions"
    if rng.random() < 0.5:  # anywhere after the first commits
        _kill_when(args, lambda: _ingests(url) >= first, rng, seed)
    else:  # inside a micro-batch's commit or its compaction: a job lease is there
        _kill_when(args, lambda: _ingests(url) >= first and any(leases.glob("*.job")), rng, seed, 0.02)
    killed = time.monotonic()
    left = sorted(p.name for p in (tmp_path / "db" / "compactions").glob("*.job"))
    print(f"killed after {_ingests(url)} ingests, {_commits(ckpt)} Spark commits; leases left: {left}")
    assert _ingests(url) < 8, f"the stream ended before it was killed (seed {seed})"
    done = _run(args)
    assert "done" in done.stdout, (seed, done.stderr[-3000:])
    m = admin.read_manifest(url)
    batches = sorted(int(g.id.rsplit("-", 1)[1]) for g in m.ingests)
    assert batches == list(range(_commits(ckpt))), (batches, seed)  # one ingest per micro-batch
    assert contents(url) == want, f"seed {seed}"

    # What the killed run left (its lease, SSTs it wrote but never committed, staged runs)
    # lapses after lease_s and the collector takes it; nothing referenced goes.
    time.sleep(max(0.0, killed + 3.5 - time.monotonic()))
    with GarbageCollector.open(url, GcOptions(min_age_s=0)) as gc:
        gc.run_once()
    db = tmp_path / "db"
    assert not list((db / "compactions").glob("*.job")), seed
    assert not list((db / "tmp").rglob("*.arrows")), seed
    live = {Path(paths.sst_path(s.id)).name for s in admin.read_manifest(url).all_ssts()}
    on_disk = {p.name for p in (db / "compacted").glob("*.sst")}
    assert on_disk == live, (sorted(on_disk - live), seed)
    assert contents(url) == want, f"seed {seed}"
