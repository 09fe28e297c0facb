#!/usr/bin/env python3
"""The overwrite workload's fill and timed loop in one process, for a sampling profiler.

    PYTHONPATH=src .venv/bin/python bench/profile_overwrite.py [--n 50000] [--value-size 4096]
        [--wait-s 2] [--setting NAME=VALUE ...] &
    py-spy record --gil --threads -r 500 -f raw -o overwrite.raw --pid $!

It opens shaledb as ``bench/run.py single --engine shaledb --workload overwrite`` does (the same
settings, keys and values), prints its pid, waits ``--wait-s`` seconds so the profiler can attach
after the imports and the setup, runs the fill and the timed overwrite, prints the rate and exits
at once: the profile holds that window only, not the close or the full scan that follow it in the
benchmark (docs/benchmarks.md, "overwrite of 4 KiB values (issue 30 item 5, second attempt)").
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time

import engines
import workloads


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=50_000)
    p.add_argument("--value-size", type=int, default=4096)
    p.add_argument("--wait-s", type=float, default=2.0, help="pause before the fill, for the profiler")
    p.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE")
    a = p.parse_args()
    scratch = tempfile.mkdtemp(prefix="shaledb-profile-")
    eng = engines.ENGINES["shaledb"](scratch, engines.parse_settings(a.setting), "file")
    plan = workloads.make_plan("overwrite", a.n, a.value_size)
    eng.open()
    print(f"pid {os.getpid()}", flush=True)
    time.sleep(a.wait_s)

    async def loop() -> None:
        t = time.perf_counter()
        await workloads.write_phase(eng, plan.fill_keys, plan.fill_vals, 100, False, 0)
        fill_s = time.perf_counter() - t
        r = await workloads.write_phase(eng, plan.work_keys, plan.work_vals, 100, False, 0)
        print(f"fill {fill_s:.2f} s, overwrite {r['secs']:.2f} s: {r['ops_per_s']:,.0f} keys/s", flush=True)

    asyncio.run(loop())
    shutil.rmtree(scratch, ignore_errors=True)
    sys.stdout.flush()
    os._exit(0)  # no close: its flush and compaction are not part of the timed window


if __name__ == "__main__":
    main()
