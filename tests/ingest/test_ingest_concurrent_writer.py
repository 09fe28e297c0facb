"""A bulk ingest against a live writer in another process: ordered or fenced, never mixed up."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ingest_kit import contents, latest

from shaledb.bulk.ingest import IngestFenced, begin_ingest, commit_ingest, write_part
from shaledb.store import open_store

WORKER = Path(__file__).with_name("ingest_writer_worker.py")


def start(url: str, mode: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.Popen(
        [sys.executable, str(WORKER), url, mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def read_until(proc: subprocess.Popen[str], want: str, acked: set[bytes], *, at_least: int = 0) -> str:
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        assert line, f"worker ended before {want!r} (exit {proc.poll()})"
        if line.startswith("ack "):
            acked.add(b"w%06d" % int(line.split()[1]))
        if line.startswith(want) and len(acked) >= at_least:
            return line.strip()


def test_a_running_writer_is_fenced_and_everything_it_acknowledged_is_ordered_before_the_ingest(tmp_path):
    url = str(tmp_path / "db")
    acked: set[bytes] = set()
    proc = start(url, "stop")
    try:
        read_until(proc, "ack", acked, at_least=200)
        plan = begin_ingest(url, ingest_id="bulk")  # fences the writer mid-stream
        fenced = read_until(proc, "fenced", acked)
        assert "took over" in fenced or "epoch" in fenced
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
    # The ingest rewrites the first 100 keys the writer wrote and adds its own.
    keys = [b"w%06d" % i for i in range(100)] + [b"x%06d" % i for i in range(100)]
    part = write_part(open_store(url), plan, 0, keys, [b"ingest"] * len(keys))
    commit_ingest(plan, [part], url)
    got = contents(url)
    assert set(got) >= acked | set(keys)
    assert all(got[k] == b"ingest" for k in keys)
    assert all(got[k] == b"writer" for k in acked - set(keys))
    assert latest(url).last_l0_seq >= plan.seq


def test_a_writer_that_restarts_after_being_fenced_makes_the_ingest_fail_cleanly(tmp_path):
    url = str(tmp_path / "db")
    acked: set[bytes] = set()
    proc = start(url, "reopen")
    try:
        read_until(proc, "ack", acked, at_least=50)
        plan = begin_ingest(url, ingest_id="loses")
        read_until(proc, "fenced", acked)
        assert proc.stdin is not None
        proc.stdin.write("reopen\n")
        proc.stdin.flush()
        read_until(proc, "reopened", acked)
        part = write_part(open_store(url), plan, 0, [b"w000000"], [b"ingest"])
        before = latest(url)
        try:
            commit_ingest(plan, [part], url)
        except IngestFenced as exc:
            assert "nothing was committed" in str(exc)
        else:
            raise AssertionError("the commit should have been fenced")
        assert all(g.id != "loses" for g in latest(url).ingests)
        assert before.writer_epoch > plan.writer_epoch
        read_until(proc, "ack", acked, at_least=len(acked) + 20)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=60)
    got = contents(url)
    assert set(got) >= acked and got[b"w000000"] == b"writer"
