"""Markdown median tables from a suite's JSONL file, shaledb beside the anchors.

Every figure is the median of the runs of one label (ops/s, p50 and p99 each the median
of their own values, as in RESULTS.md). Ratios are shaledb (or any engine) over rocksdict
for the same workload, size and batch, the comparison docs/benchmarks.md sets as the bar. The
"spread" column is max/min ops/s over the runs, and "others" the median number of CPU cores
other processes kept busy during them (recorded since the CpuMeter was added), so a reader
can see how noisy a cell was.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable
from typing import Any

Groups = dict[str, list[dict[str, Any]]]
BASE = "rocksdict"
DASH = "\u2013"  # an en dash marks an empty cell, as in RESULTS.md
TIMES = "\u00d7"
HEADLINE = [  # (row title, workload|batch|durability, what the cell shows)
    ("fillseq, batches of 100 (keys/s)", "fillseq|b100|nd", "ops"),
    ("fillrandom, batches of 100 (keys/s)", "fillrandom|b100|nd", "ops"),
    ("fillrandom, single puts (puts/s, p50 µs)", "fillrandom|b1|nd", "ops_p50"),
    ("overwrite, batches of 100 (keys/s)", "overwrite|b100|nd", "ops"),
    ("durable batches of 100 (keys/s, p50 ms/batch)", "fillseq|b100|dur", "ops_p50ms"),
    ("durable single puts (puts/s, p50 ms)", "fillseq|b1|dur", "ops_p50ms"),
    ("readrandom after reopen (gets/s, p50 / p99 µs)", "readrandom|-|-", "ops_p50_p99"),
    ("readmissing (gets/s, p50 µs)", "readmissing|-|-", "ops_p50"),
    ("scan, 100 keys (scans/s, p50 µs)", "scan|-|-", "ops_p50"),
    ("peak RSS, readrandom (MiB)", "readrandom|-|-", "rss"),
    ("disk after fillrandom b100 (MB)", "fillrandom|b100|nd", "disk"),
]
ENGINE_ORDER = [
    "shaledb-file",
    "rocksdict",
    "plyvel",
    "lmdb",
    "slatedb-file",
    "pydict",
    "shaledb-memory",
    "slatedb-memory",
    "shaledb-s3",
]
WORKLOAD_ORDER = ["fillseq", "fillrandom", "overwrite", "readrandom", "readmissing", "scan"]


def load(path: str, max_other_cores: float | None = None) -> tuple[Groups, int]:
    """Runs by label; with ``max_other_cores``, runs measured as contended are left out.

    A run without the measurement (recorded before the CpuMeter existed) is kept.
    Returns the groups and how many runs were left out.
    """
    groups: Groups = {}
    dropped = 0
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            r = json.loads(line)
            busy = r.get("other_cpu_cores")
            if max_other_cores is not None and busy is not None and busy > max_other_cores:
                dropped += 1
                continue
            groups.setdefault(r["label"], []).append(r)
    return groups, dropped


def med(rs: list[dict[str, Any]], k: str) -> Any:
    xs = [r[k] for r in rs if r.get(k) is not None]
    return statistics.median(xs) if xs else None


def fmt(x: Any) -> str:
    """3 significant figures below 1,000, thousands separators above."""
    if x is None:
        return DASH
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        if abs(x) >= 1000:
            return f"{x:,.0f}"
        if abs(x) >= 100:
            return f"{x:.0f}"
        if abs(x) >= 10:
            return f"{x:.1f}"
        return f"{x:.2f}"
    if isinstance(x, int):
        return f"{x:,}"
    return str(x)


def ratio(a: float | None, b: float | None) -> str:
    if not a or not b:
        return DASH
    r = a / b
    if r >= 10:
        return f"{r:.0f}{TIMES}"
    return f"{r:.2f}{TIMES}" if r >= 0.1 else f"{r:.2g}{TIMES}"


def split(label: str) -> tuple[str, str, int, int]:
    """label -> (variant, workload|batch|durability, n, value_size)."""
    variant, wl, b, dur, n, v = label.split("|")
    return variant, f"{wl}|{b}|{dur}", int(n), int(v)


def sizes(groups: Groups) -> list[tuple[int, int]]:
    return sorted({split(lab)[2:] for lab in groups}, key=lambda nv: (nv[1], -nv[0]))


def cell(rs: list[dict[str, Any]] | None, kind: str) -> str:
    if not rs:
        return DASH
    ops = fmt(med(rs, "ops_per_s"))
    star = "*" if any(r.get("truncated") for r in rs) else ""
    p50 = med(rs, "lat_p50_us")
    if kind == "ops":
        return ops + star
    if kind == "ops_p50":
        return f"{ops}{star} ({fmt(p50)})"
    if kind == "ops_p50ms":
        return f"{ops}{star} ({fmt(p50 / 1000.0) if p50 is not None else DASH})"
    if kind == "ops_p50_p99":
        return f"{ops} ({fmt(p50)} / {fmt(med(rs, 'lat_p99_us'))})"
    if kind == "rss":
        return fmt(med(rs, "peak_rss_mb"))
    disk = med(rs, "disk_bytes")
    if disk is None:
        disk = med(rs, "store_bytes")
    return fmt(disk / 1e6) if disk is not None else DASH


def headline(groups: Groups, n: int, v: int, pending: bool) -> None:
    """Workloads as rows, engines as columns, shaledb-file first with its ratio to rocksdict."""
    present = {split(lab)[0] for lab in groups if split(lab)[2:] == (n, v)}
    engines = [e for e in ENGINE_ORDER if e in present or (pending and e == "shaledb-file")]
    engines += sorted(e for e in present if e not in engines and "@" not in e)
    runs = sorted({len(rs) for lab, rs in groups.items() if split(lab)[2:] == (n, v)})
    print(f"\n#### N={n:,}, V={v} (median of {'/'.join(map(str, runs))} runs)\n")
    hdr = ["workload"]
    for e in engines:
        hdr.append(e)
        if e == "shaledb-file":
            hdr.append(f"shaledb ÷ {BASE}")
    print("| " + " | ".join(hdr) + " |")
    print("|---" * len(hdr) + "|")
    for title, mid, kind in HEADLINE:
        row = [title]
        for e in engines:
            rs = groups.get(f"{e}|{mid}|{n}|{v}")
            if e == "shaledb-file" and not rs and pending:
                row += ["pending", "pending"]
                continue
            row.append(cell(rs, kind))
            if e == "shaledb-file":
                base = groups.get(f"{BASE}|{mid}|{n}|{v}")
                if kind in ("rss", "disk"):
                    row.append(DASH)
                else:
                    row.append(
                        ratio(med(rs, "ops_per_s") if rs else None, med(base, "ops_per_s") if base else None)
                    )
        print("| " + " | ".join(row) + " |")


def detail(groups: Groups) -> None:
    """One table per workload and size, every variant, ratio to rocksdict and spread."""
    sections: dict[tuple[int, int, str], list[str]] = {}
    for lab in groups:
        _variant, mid, n, v = split(lab)
        wl = mid.split("|")[0]
        if wl in WORKLOAD_ORDER:
            sections.setdefault((n, v, wl), []).append(lab)

    def key(s: tuple[int, int, str]) -> tuple[int, int, int]:
        return (s[1], -s[0], WORKLOAD_ORDER.index(s[2]))

    for n, v, wl in sorted(sections, key=key):
        labs = sorted(
            sections[(n, v, wl)], key=lambda lab: (_shape_rank(split(lab)[1]), _engine_rank(split(lab)[0]))
        )
        extra: list[tuple[str, str]] = []
        if wl == "overwrite":
            extra = [("full scan keys/s", "fullscan_keys_per_s")]
        elif wl in ("readrandom", "readmissing", "scan"):
            extra = [("reopen s", "reopen_s")]
        print(f"\n#### {wl}, N={n:,}, V={v}\n")
        hdr = [
            "engine",
            "batch",
            "durable",
            "runs",
            "ops",
            "ops/s",
            f"÷ {BASE}",
            "spread",
            "others",
            "p50 µs",
            "p99 µs",
        ]
        hdr += [e[0] for e in extra] + ["close s", "peak RSS MiB", "disk MB"]
        print("| " + " | ".join(hdr) + " |")
        print("|---" * len(hdr) + "|")
        for lab in labs:
            rs = groups[lab]
            variant, mid, _n, _v = split(lab)
            _wl, b, dur = mid.split("|")
            base = groups.get(f"{BASE}|{mid}|{n}|{v}")
            ops_s = [r["ops_per_s"] for r in rs]
            row = [
                variant,
                b.lstrip("b"),
                {"nd": "no", "dur": "yes"}.get(dur, DASH),
                str(len(rs)),
                fmt(int(med(rs, "ops"))) + ("*" if any(r.get("truncated") for r in rs) else ""),
                fmt(med(rs, "ops_per_s")),
                ratio(med(rs, "ops_per_s"), med(base, "ops_per_s") if base else None),
                f"{max(ops_s) / min(ops_s):.2f}",
                fmt(med(rs, "other_cpu_cores")),
                fmt(med(rs, "lat_p50_us")),
                fmt(med(rs, "lat_p99_us")),
            ]
            row += [fmt(med(rs, e[1])) for e in extra]
            disk = med(rs, "disk_bytes")
            if disk is None:
                disk = med(rs, "store_bytes")
            row += [fmt(med(rs, "close_s")), fmt(med(rs, "peak_rss_mb")), fmt(disk / 1e6) if disk else DASH]
            print("| " + " | ".join(row) + " |")


def _shape_rank(mid: str) -> tuple[bool, int]:
    """Non-durable before durable, batches of 100 before single puts."""
    _wl, b, dur = mid.split("|")
    return (dur == "dur", -int(b[1:]) if b[1:].isdigit() else 0)


def _engine_rank(variant: str) -> tuple[int, str]:
    base = variant.split("@", maxsplit=1)[0]
    return (ENGINE_ORDER.index(base) if base in ENGINE_ORDER else len(ENGINE_ORDER), variant)


def table(groups: Groups, workload: str, title: str, cols: list[tuple[str, Callable[[Any], str]]]) -> None:
    labs = [lab for lab in groups if split(lab)[1].startswith(workload + "|")]
    if not labs:
        return
    print(f"\n#### {title}\n")
    print("| engine | N | V | runs | " + " | ".join(c[0] for c in cols) + " |")
    print("|---" * (4 + len(cols)) + "|")
    for lab in sorted(labs, key=lambda lab: (split(lab)[3], -split(lab)[2], _engine_rank(split(lab)[0]))):
        rs = groups[lab]
        variant, _mid, n, v = split(lab)
        print(f"| {variant} | {n:,} | {v} | {len(rs)} | " + " | ".join(f(rs) for _h, f in cols) + " |")


def durable_mt(groups: Groups) -> None:
    def m(k: str, scale: float = 1.0) -> Callable[[Any], str]:
        return lambda rs: fmt(med(rs, k) / scale) if med(rs, k) is not None else DASH

    table(
        groups,
        "durable_mt",
        "durable_mt: 16 concurrent writers, durable single puts (capped by --max-seconds)",
        [
            ("puts/s", lambda rs: cell(rs, "ops")),
            ("p50 ms", m("lat_p50_us", 1000.0)),
            ("p99 ms", m("lat_p99_us", 1000.0)),
            ("peak RSS MiB", m("peak_rss_mb")),
        ],
    )


def memcheck(groups: Groups) -> None:
    def m(k: str) -> Callable[[Any], str]:
        return lambda rs: fmt(med(rs, k))

    def pair(a: str, b: str) -> Callable[[Any], str]:
        return lambda rs: f"{fmt(med(rs, a))} / {fmt(med(rs, b))}"

    def within(key: str) -> Callable[[Any], str]:
        def count(rs: list[dict[str, Any]]) -> str:
            vals = [r[key] for r in rs if key in r]
            return f"{sum(vals)}/{len(vals)}" if vals else DASH

        return count

    table(
        groups,
        "memcheck",
        f"memcheck: fill + flush + reopen + N/2 gets + 1,000 scans; peak RSS vs 1.5 {TIMES} budgets + interpreter",
        [
            ("interpreter MiB (before / after engine import)", pair("rss_base_mb", "rss_import_mb")),
            ("budgets MiB", m("budget_mb")),
            (
                "limit MiB (engine code in the interpreter / charged to budgets)",
                pair("rss_limit_mb", "rss_limit_pre_import_mb"),
            ),
            ("peak after fill", m("peak_rss_fill_mb")),
            ("peak after gets", m("peak_rss_gets_mb")),
            ("peak MiB", m("peak_rss_mb")),
            ("within limit", within("rss_within_limit")),
            ("within the stricter limit", within("rss_within_limit_pre_import")),
            ("fill keys/s", m("ops_per_s")),
            ("gets/s", m("gets_per_s")),
            ("scans/s", m("scans_per_s")),
        ],
    )


def environment(groups: Groups) -> None:
    versions: dict[str, set[str]] = {}
    machine: dict[str, Any] = {}
    for rs in groups.values():
        for r in rs:
            versions.setdefault(r["engine_kind"], set()).add(str(r.get("version")))
            machine = r.get("machine") or machine
    print(
        f"Machine: {machine.get('cpus')} CPUs ({machine.get('cpu', '?')}), {machine.get('mem_gib')} GiB RAM, ",
        end="",
    )
    print(f"Linux {machine.get('kernel')}, Python {next(iter(groups.values()))[0].get('python')}.\n")
    print("Versions: " + "; ".join(f"{k} {', '.join(sorted(v))}" for k, v in sorted(versions.items())) + ".")


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="run.py report", description="median tables from a suite JSONL")
    p.add_argument("--out", required=True, help="the suite's JSONL file")
    p.add_argument("--full", action="store_true", help="also one detailed table per workload and size")
    p.add_argument(
        "--max-other-cores",
        type=float,
        default=None,
        help="leave out runs during which other processes kept more than this many cores busy",
    )
    a = p.parse_args(argv)
    groups, dropped = load(a.out, a.max_other_cores)
    if not groups:
        raise SystemExit(f"no results in {a.out}")
    pending = not any(lab.startswith("shaledb") for lab in groups)
    environment(groups)
    print("\nCells: median ops/s (keys/s for writes, gets/s, 100-key scans/s), latency in brackets.")
    print("`*` = a durable run stopped by --max-seconds (ops/s over the ops it completed).")
    if a.max_other_cores is not None:
        print(f"Left out: {dropped} runs during which other processes kept > {a.max_other_cores} cores busy.")
    for n, v in sizes(groups):
        headline(groups, n, v, pending)
    durable_mt(groups)
    memcheck(groups)
    if a.full:
        detail(groups)
