"""A compactor in its own process, killed (SIGKILL) at random points and restarted,
while this process writes and a reader thread reads: no read fails or returns a
wrong value, nothing is lost, and a final GC pass leaves no orphans."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from shaledb import Db, GarbageCollector, Settings
from shaledb.clock import SYSTEM_CLOCK
from shaledb.format import paths
from shaledb.manifest import ManifestStore
from shaledb.store import open_store
from shaledb.testing.seeds import test_seed

WRITER = Settings(
    l0_sst_size_bytes=32 * 1024,
    max_unflushed_bytes=1 << 20,
    l0_max_ssts=24,
    manifest_poll_interval_s=0.05,
    compactor=None,
    garbage_collector=None,
)
KEYS = 1500


def value(k: int, version: int) -> bytes:
    return b"%06d:%08d:" % (k, version) + b"x" * (k % 97)


def version_of(v: bytes | None) -> int:
    return -1 if v is None else int(v.split(b":")[1])


SHALEDB = [sys.executable, "-c", "import sys; from shaledb.cli import main; sys.exit(main())"]
"""The ``shaledb`` command, run by this interpreter."""


def start_compactor(url: str, log: Path) -> subprocess.Popen[bytes]:
    cmd = [*SHALEDB, "--path", url, "run-compactor", "--poll-interval", "0.02"]
    cmd += ["--max-subcompactions", "2"]
    with log.open("ab") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)


def test_compactor_process_killed_and_restarted_under_load(tmp_path: Path) -> None:
    seed = test_seed()
    rng = random.Random(seed)
    url = str(tmp_path / "db")
    log = tmp_path / "compactor.log"
    db = Db.open(url, settings=WRITER, seed=seed)
    # Per key: ``issued`` is set before a put (an upper bound on what a read may see),
    # ``written`` after it returns (a lower bound for reads that start later).
    issued: dict[int, int] = {}
    written: dict[int, int] = {}
    stop = threading.Event()
    errors: list[str] = []
    reads = [0, 0]

    def writer() -> None:
        wrng = random.Random(seed + 1)
        version = 0
        while not stop.is_set():
            version += 1
            k = wrng.randrange(KEYS)
            issued[k] = version
            db.put(b"k%06d" % k, value(k, version), durable=wrng.random() < 0.02)
            written[k] = version

    def reader() -> None:
        rrng = random.Random(seed + 2)
        while not stop.is_set():
            try:
                k = rrng.randrange(KEYS)
                lo = written.get(k, -1)
                got = version_of(db.get(b"k%06d" % k))
                hi = issued.get(k, -1)
                if not lo <= got <= hi:
                    errors.append(f"get k={k}: version {got} not in [{lo}, {hi}]")
                reads[0] += 1
                if rrng.random() < 0.01:
                    before = dict(written)
                    with db.snapshot() as s:
                        first = dict(s.scan())
                        after = dict(issued)
                        for kk in range(KEYS):
                            got = version_of(first.get(b"k%06d" % kk))
                            if not before.get(kk, -1) <= got <= after.get(kk, -1):
                                errors.append(
                                    f"snapshot k={kk}: {got} outside [{before.get(kk)}, {after.get(kk)}]"
                                )
                        time.sleep(rrng.random() * 0.3)  # compactions happen meanwhile
                        if dict(s.scan()) != first:
                            errors.append("a snapshot changed while open")
                    reads[1] += 1
            except Exception as exc:  # any failed read is a bug
                errors.append(f"read failed: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    kills = 0
    try:
        for _ in range(7):
            proc = start_compactor(url, log)
            time.sleep(rng.uniform(0.3, 1.5))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
        proc = start_compactor(url, log)  # a last one that is stopped cleanly
        time.sleep(1.0)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not errors, f"seed={seed}: {errors[:10]}"
    assert reads[0] > 100 and reads[1] > 0
    expected = {b"k%06d" % k: value(k, v) for k, v in written.items()}
    assert dict(db.scan()) == expected
    db.close()  # while the compactor runs: a full L0 would stall the final flush otherwise
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, log.read_text()[-3000:]
    text = log.read_text()
    assert "committed" in text, text[-3000:]

    # Settle: one clean compactor pass, then GC with min_age 0 and nothing running.
    subprocess.run([*SHALEDB, "--path", url, "run-compactor", "--once"], check=True)
    store = open_store(url)
    report = GarbageCollector.open(store=store).run_once(min_age_s=0)
    latest = ManifestStore(store, SYSTEM_CLOCK, random.Random(), author="test").require_latest()
    assert not latest.checkpoints
    referenced = {s.id for s in latest.all_ssts()}
    listed = {paths.parse_sst_id(m.path) for m in store.list(paths.SST_DIR)}
    assert listed == referenced, f"seed={seed}: orphans left {listed - referenced}"
    assert not list(store.list(paths.JOB_DIR)) and not list(store.list(paths.TMP_DIR))
    print(f"kills={kills} reads={reads} gc={report.counts()}")
    with Db.open(url, settings=WRITER) as db2:
        assert dict(db2.scan()) == expected
