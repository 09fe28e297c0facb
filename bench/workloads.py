"""Workload definitions, the timed loops and the measurements around them.

The definitions follow the steering team's anchor harness (RocksDB db_bench style) exactly,
so that figures line up with ``shared/bench/RESULTS.md``:

* keys are ``b"%016d" % (2*i)`` for i in [0, N); missing keys are the odd numbers between;
* values come from a pool of 1,009 random (incompressible) strings of V bytes, the j-th
  written value being ``pool[j % 1009]``;
* the random choices are drawn from one ``random.Random(20240601)`` in the same order as
  the anchor harness, so the same keys are read and scanned;
* write ops/s counts keys per second over the whole timed loop, building each batch list
  in Python included; latencies are per call (per batch, per put, per get, per scan).

Everything a workload needs (keys, values, read keys, scan starts) is generated *before*
the engine is imported or opened, and the process RSS is sampled right then and again after
the engine's module is imported: the interpreter baselines the memory check compares the
peak against (``run.memory_check``).

Every timed loop is written twice, once plain and once with ``await``, because SlateDB's
binding is async: awaiting a synchronous engine would add cost to it, and driving an async
one through ``loop.run_until_complete`` per call would add far more.
"""

from __future__ import annotations

import array
import asyncio
import inspect
import os
import random
import resource
import threading
import time
from dataclasses import dataclass, field
from typing import Any

SEED = 20240601
POOL = 1009
SCANS = 1000
SCAN_LEN = 100
MT_THREADS = 16
CHECK_EVERY = 16  # single-op loops look at the clock (for --max-seconds) every 16 ops

WORKLOADS = (
    "fillseq",
    "fillrandom",
    "overwrite",
    "readrandom",
    "readmissing",
    "scan",
    "durable_mt",
    "memcheck",
)
READ_WORKLOADS = ("readrandom", "readmissing", "scan", "memcheck")
MiB = 1 << 20


def key(i: int) -> bytes:
    return b"%016d" % (2 * i)


def missing_key(i: int) -> bytes:
    return b"%016d" % (2 * i + 1)


# --------------------------------------------------------------------------- measurements


def rss_mb() -> float | None:
    """Current resident set size (from /proc, so it can go down, unlike ru_maxrss)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MiB
    except OSError:
        return None


def peak_rss_mb() -> float:
    """Peak RSS of this process so far; Linux reports ru_maxrss in KiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class CpuMeter:
    """CPU cores that *other* processes used while we ran: machine busy time minus ours.

    On a shared 2-core machine this tells a clean run from one that fought someone's test
    suite for the CPU; the report shows it beside every median. Child processes (the moto
    server of --store s3) count as others.
    """

    def __init__(self) -> None:
        self.t0, self.busy0, self.own0 = time.monotonic(), machine_busy_s(), own_cpu_s()

    def other_cores(self) -> float | None:
        if self.busy0 is None:
            return None
        busy = machine_busy_s()
        secs = time.monotonic() - self.t0
        if busy is None or secs <= 0:
            return None
        return max(0.0, (busy - self.busy0 - (own_cpu_s() - self.own0)) / secs)


def machine_busy_s() -> float | None:
    """Seconds of non-idle CPU time on all cores since boot (from /proc/stat)."""
    try:
        with open("/proc/stat") as f:
            vals = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    idle = vals[3] + vals[4]  # idle + iowait
    return (sum(vals) - idle) / os.sysconf("SC_CLK_TCK")


def own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


# ------------------------------------------------------- shaledb-only scripts (compaction, journal)


def settle(db: Any, emb: Any, opts: Any) -> float:
    """Memtable to L0, then wait until the embedded compactor ``emb`` is idle, the scheduler
    proposes nothing for either tree and the manifest has not changed for 1 s; seconds taken."""
    from shaledb.compaction import schedule

    t = time.perf_counter()
    db.flush(memtable=True)
    last_id, stable_since = -1, time.perf_counter()
    while True:
        m = db.manifest
        if m.id != last_id:
            last_id, stable_since = m.id, time.perf_counter()
        busy = any(schedule(m, opts, tree) for tree in ("data", "index"))
        if emb.idle and not busy and time.perf_counter() - stable_since > 1.0:
            return time.perf_counter() - t
        time.sleep(0.05)


def read_rate(
    path: str, keys: list[bytes], n: int, seed: int, *, op: str = "get", settings: Any = None
) -> float:
    """``op`` ("get" or "head") per second over ``n`` keys drawn from ``keys``, on the
    database at ``path`` opened cold with no compactor or GC (``settings`` adds to that)."""
    from shaledb import Db, Settings

    settings = (settings or Settings()).replace(compactor=None, garbage_collector=None)
    rng = random.Random(seed)
    sample = [keys[rng.randrange(len(keys))] for _ in range(n)]
    with Db.open(path, settings=settings) as db:
        fn = db.get if op == "get" else db.head
        t0 = time.perf_counter()
        for k in sample:
            if fn(k) is None:
                raise AssertionError(f"missing key {k!r}")
        return n / (time.perf_counter() - t0)


def disk_usage(path: str) -> tuple[int, int]:
    """(apparent bytes, allocated bytes) of every file under ``path``."""
    apparent = allocated = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            apparent += st.st_size
            allocated += st.st_blocks * 512
    return apparent, allocated


def lat_stats(lat_ns: array.array[int]) -> dict[str, Any]:
    """Percentiles of the full per-call sample, in µs (nearest-rank, as the anchors)."""
    if not lat_ns:
        return {}
    s = sorted(lat_ns)
    n = len(s)

    def pct(p: float) -> float:
        return s[min(n - 1, int(p * n))] / 1000.0

    return {
        "lat_p50_us": pct(0.50),
        "lat_p99_us": pct(0.99),
        "lat_p999_us": pct(0.999),
        "lat_max_us": s[-1] / 1000.0,
        "lat_mean_us": sum(s) / n / 1000.0,
    }


async def maybe_await(x: Any) -> Any:
    if inspect.isawaitable(x):
        return await x
    return x


# --------------------------------------------------------------------------- the plan


@dataclass
class Plan:
    """All inputs of one run, generated up front (not timed, counted in the baseline)."""

    n: int
    value_size: int
    pool: list[bytes]
    fill_keys: list[bytes] = field(default_factory=list)
    fill_vals: list[bytes] = field(default_factory=list)
    work_keys: list[bytes] = field(default_factory=list)  # overwrite keys, or keys to get
    work_vals: list[bytes] = field(default_factory=list)
    missing_keys: list[bytes] = field(default_factory=list)
    scan_starts: list[bytes] = field(default_factory=list)


def make_plan(workload: str, n: int, value_size: int) -> Plan:
    """Draw keys and values in the anchor harness's order (same seed, same sequence)."""
    rng = random.Random(SEED)
    pool = [rng.randbytes(value_size) for _ in range(POOL)]
    plan = Plan(n, value_size, pool)
    vals = [pool[j % POOL] for j in range(n)]
    order = list(range(n))
    if workload in ("fillrandom", *READ_WORKLOADS):
        rng.shuffle(order)
    plan.fill_keys = [key(i) for i in order]
    plan.fill_vals = vals
    if workload == "overwrite":
        plan.work_keys = [key(rng.randrange(n)) for _ in range(n)]
        plan.work_vals = vals
    elif workload in ("readrandom", "memcheck"):
        plan.work_keys = [key(rng.randrange(n)) for _ in range(n // 2)]
    elif workload == "readmissing":
        plan.missing_keys = [missing_key(rng.randrange(n)) for _ in range(n // 2)]
    if workload in ("scan", "memcheck"):
        plan.scan_starts = [key(rng.randrange(n - SCAN_LEN)) for _ in range(SCANS)]
    return plan


# --------------------------------------------------------------------------- timed loops


async def write_phase(
    eng: Any, keys: list[bytes], vals: list[bytes], batch: int, durable: bool, max_seconds: float
) -> dict[str, Any]:
    """Write ``keys`` in batches of ``batch`` (1 = single puts); stop early after max_seconds."""
    n = len(keys)
    put, write = eng.writers(durable)
    lat = array.array("q")
    pc = time.perf_counter_ns
    max_ns = int(max_seconds * 1e9) if max_seconds else 0
    done = 0
    t0 = pc()
    if batch == 1:
        for c in range(0, n, CHECK_EVERY):
            ks, vs = keys[c : c + CHECK_EVERY], vals[c : c + CHECK_EVERY]
            if eng.is_async:
                for k, v in zip(ks, vs):
                    t = pc()
                    await put(k, v)
                    lat.append(pc() - t)
            else:
                for k, v in zip(ks, vs):
                    t = pc()
                    put(k, v)
                    lat.append(pc() - t)
            done = min(n, c + CHECK_EVERY)
            if max_ns and pc() - t0 > max_ns:
                break
    else:
        for s in range(0, n, batch):
            items = list(zip(keys[s : s + batch], vals[s : s + batch]))
            t = pc()
            if eng.is_async:
                await write(items)
            else:
                write(items)
            lat.append(pc() - t)
            done = min(n, s + batch)
            if max_ns and pc() - t0 > max_ns:
                break
    secs = (pc() - t0) / 1e9
    out = {
        "ops": done,
        "truncated": done < n,
        "secs": secs,
        "ops_per_s": done / secs,
        "lat_unit": "per put" if batch == 1 else f"per batch of {batch}",
    }
    out.update(lat_stats(lat))
    return out


async def get_phase(eng: Any, keys: list[bytes]) -> dict[str, Any]:
    get = eng.get
    lat = array.array("q")
    pc = time.perf_counter_ns
    found = 0
    t0 = pc()
    if eng.is_async:
        for k in keys:
            t = pc()
            r = await get(k)
            lat.append(pc() - t)
            if r is not None:
                found += 1
    else:
        for k in keys:
            t = pc()
            r = get(k)
            lat.append(pc() - t)
            if r is not None:
                found += 1
    secs = (pc() - t0) / 1e9
    out = {"ops": len(keys), "secs": secs, "ops_per_s": len(keys) / secs, "found": found}
    out["lat_unit"] = "per get"
    out.update(lat_stats(lat))
    return out


async def scan_phase(eng: Any, starts: list[bytes]) -> dict[str, Any]:
    lat = array.array("q")
    pc = time.perf_counter_ns
    total = 0
    t0 = pc()
    if eng.is_async:
        for s in starts:
            t = pc()
            total += await eng.scan(s, SCAN_LEN)
            lat.append(pc() - t)
    else:
        for s in starts:
            t = pc()
            total += eng.scan(s, SCAN_LEN)
            lat.append(pc() - t)
    secs = (pc() - t0) / 1e9
    out = {
        "ops": len(starts),
        "secs": secs,
        "ops_per_s": len(starts) / secs,
        "keys_scanned": total,
        "keys_per_s": total / secs,
        "lat_unit": f"per scan of {SCAN_LEN}",
    }
    out.update(lat_stats(lat))
    return out


async def durable_mt_phase(
    eng: Any, keys: list[bytes], vals: list[bytes], writers: int, max_seconds: float
) -> dict[str, Any]:
    """``writers`` concurrent writers, each doing durable single puts of its share of keys.

    Sync engines get one OS thread per writer (they must be thread-safe); async engines get
    one asyncio task per writer on the running loop. Writer w writes keys[w::writers] in
    order. ops/s is all completed puts over the wall time from the common start until the
    last writer stops (at its last key or at max_seconds).
    """
    put, _write = eng.writers(True)
    pc = time.perf_counter_ns
    max_ns = int(max_seconds * 1e9) if max_seconds else 0
    lats = [array.array("q") for _ in range(writers)]
    done = [0] * writers
    errors: list[BaseException] = []
    start = [0]

    def thread_body(w: int, barrier: threading.Barrier) -> None:
        ks, vs, lat = keys[w::writers], vals[w::writers], lats[w]
        barrier.wait()
        t0 = start[0]
        try:
            for i, (k, v) in enumerate(zip(ks, vs)):
                t = pc()
                put(k, v)
                lat.append(pc() - t)
                if max_ns and i % CHECK_EVERY == 0 and pc() - t0 > max_ns:
                    break
        except BaseException as exc:  # surfaced after join; a dead writer must not hide
            errors.append(exc)
        done[w] = len(lat)

    async def task_body(w: int) -> None:
        ks, vs, lat = keys[w::writers], vals[w::writers], lats[w]
        t0 = start[0]
        for i, (k, v) in enumerate(zip(ks, vs)):
            t = pc()
            await put(k, v)
            lat.append(pc() - t)
            if max_ns and i % CHECK_EVERY == 0 and pc() - t0 > max_ns:
                break
        done[w] = len(lat)

    if eng.is_async:
        start[0] = pc()
        await asyncio.gather(*(task_body(w) for w in range(writers)))
    else:
        barrier = threading.Barrier(writers + 1)
        threads = [threading.Thread(target=thread_body, args=(w, barrier)) for w in range(writers)]
        for th in threads:
            th.start()
        start[0] = pc()
        barrier.wait()
        for th in threads:
            th.join()
        if errors:
            raise errors[0]
    secs = (pc() - start[0]) / 1e9
    total = sum(done)
    merged = array.array("q")
    for lat in lats:
        merged.extend(lat)
    out = {
        "ops": total,
        "truncated": total < len(keys),
        "secs": secs,
        "ops_per_s": total / secs,
        "writers": writers,
        "lat_unit": "per durable put",
    }
    out.update(lat_stats(merged))
    return out


# --------------------------------------------------------------------------- one run


async def run_workload(eng: Any, workload: str, plan: Plan, opts: Any) -> dict[str, Any]:
    """Set up, time and tear down one workload; returns the measured fields."""
    pc = time.perf_counter
    res: dict[str, Any] = {}
    t = pc()
    await maybe_await(eng.open())
    res["open_s"] = pc() - t

    if workload in ("fillseq", "fillrandom"):
        res.update(
            await write_phase(eng, plan.fill_keys, plan.fill_vals, opts.batch, opts.durable, opts.max_seconds)
        )
    elif workload == "overwrite":
        t = pc()
        await write_phase(eng, plan.fill_keys, plan.fill_vals, 100, False, 0)
        res["setup_s"] = pc() - t
        res.update(
            await write_phase(eng, plan.work_keys, plan.work_vals, opts.batch, opts.durable, opts.max_seconds)
        )
        eng.begin_reads()
        t = pc()
        live = await maybe_await(eng.count_all())
        secs = pc() - t
        res.update({"live_keys": live, "fullscan_s": secs, "fullscan_keys_per_s": live / secs})
        if live != plan.n:
            raise AssertionError(f"full scan found {live} live keys, expected {plan.n}")
    elif workload == "durable_mt":
        res.update(
            await durable_mt_phase(eng, plan.fill_keys, plan.fill_vals, opts.threads, opts.max_seconds)
        )
    elif workload in READ_WORKLOADS:
        # The anchors' setup: non-durable fill in batches of 100, memtable flush, close, reopen.
        t = pc()
        fill = await write_phase(eng, plan.fill_keys, plan.fill_vals, 100, False, 0)
        await maybe_await(eng.close(flush_memtable=True))
        res["setup_s"] = pc() - t
        res["setup_fill_ops_per_s"] = fill["ops_per_s"]
        res["peak_rss_fill_mb"] = peak_rss_mb()
        t = pc()
        await maybe_await(eng.open())
        res["reopen_s"] = pc() - t
        eng.begin_reads()
        if workload == "readrandom":
            res.update(await get_phase(eng, plan.work_keys))
            if res["found"] != len(plan.work_keys):
                raise AssertionError(f"found {res['found']} of {len(plan.work_keys)} keys")
        elif workload == "readmissing":
            res.update(await get_phase(eng, plan.missing_keys))
            if res["found"]:
                raise AssertionError(f"found {res['found']} keys that were never written")
        elif workload == "scan":
            res.update(await scan_phase(eng, plan.scan_starts))
            if res["keys_scanned"] != SCANS * SCAN_LEN:
                raise AssertionError(f"scanned {res['keys_scanned']} keys, expected {SCANS * SCAN_LEN}")
        else:  # memcheck: the fill above, then gets and scans, peak RSS after each phase
            gets = await get_phase(eng, plan.work_keys)
            res["peak_rss_gets_mb"] = peak_rss_mb()
            scans = await scan_phase(eng, plan.scan_starts)
            res.update({"ops": plan.n, "ops_per_s": fill["ops_per_s"], "lat_unit": "fill per batch"})
            res.update({k: fill[k] for k in ("lat_p50_us", "lat_p99_us")})
            res["gets_per_s"] = gets["ops_per_s"]
            res["scans_per_s"] = scans["ops_per_s"]
    else:
        raise SystemExit(f"unknown workload {workload}")

    t = pc()
    await maybe_await(eng.close())
    res["close_s"] = pc() - t
    return res
