"""CLI commands of the background roles: ``run-compactor`` and ``run-gc``.

Both run until SIGINT or SIGTERM (finishing the current job or pass), or do
one pass with ``--once`` (for cron and tests). Each pass that did something
prints one line (or one JSON object per line with ``--json``).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from ..admin.gc import UNCOMMITTED_MIN_AGE_S, GarbageCollector, GcReport
from ..clock import SYSTEM_CLOCK
from ..compaction import CompactionReport, Compactor
from ..duration import format_duration
from ..errors import FencedError, named_as_typed
from ..numbers import counted, human_size
from ..settings import CompactorOptions, GcOptions
from .options import SECONDS_HELP, seconds_option
from .output import EXIT_FENCED, Output, command, id_list
from .settings import cli_settings


@contextmanager
def _stop_on_signals(stop: Callable[[], None]) -> Iterator[None]:
    """Call ``stop`` on SIGINT/SIGTERM while the block runs (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in old:
        signal.signal(s, lambda *_: stop())
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _emit_line(out: Output, data: dict[str, Any], text: str) -> None:
    if out.as_json:
        out.stream.write(json.dumps(data, sort_keys=True, default=str) + "\n")
    else:
        out.stream.write(text + "\n")
    out.stream.flush()


def _compaction_line(r: CompactionReport) -> str:
    if r.held_by:
        return f"manifest {r.manifest_id}: standing by: {r.held_by} holds the compactor role; nothing done"
    rate = r.input_bytes / 1e6 / r.duration_s if r.duration_s > 0 else 0.0
    jobs = "; ".join(r.jobs) if r.jobs else "nothing to do"
    return (
        f"manifest {r.manifest_id}: {r.committed} committed, {r.aborted} aborted; "
        f"{human_size(r.input_bytes)} merged into {human_size(r.bytes_written)} "
        f"in {r.duration_s:.2f}s ({rate:.1f} MB/s): {jobs}"
    )


def _compactor_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--once", action="store_true", help="run the jobs due now, then exit")
    p.add_argument(
        "--poll-interval", default=None, metavar="SECONDS", help=f"manifest poll interval ({SECONDS_HELP})"
    )
    p.add_argument(
        "--max-subcompactions", type=int, default=None, metavar="N", help="parallel key ranges per job"
    )
    p.add_argument(
        "--takeover",
        action="store_true",
        help="fence a live compactor at once instead of standing by until its lease lapses",
    )


@command(
    "run-compactor",
    "compact L0 SSTs and sorted runs (stands by while another standalone compactor is live)",
)(_compactor_args)
def run_compactor(args: argparse.Namespace, out: Output) -> int | None:
    # The [compactor] table of --settings / SHALEDB_COMPACTOR__* (they were ignored), unless
    # it turns compaction off: the file a writer reads says that to stop its embedded one.
    settings = cli_settings(args)
    opts = settings.compactor or CompactorOptions()
    changes: dict[str, Any] = {}
    flags: dict[str, tuple[str, str]] = {}
    if args.poll_interval is not None:
        changes["poll_interval_s"] = seconds_option(args.poll_interval, "--poll-interval")
        flags["poll_interval_s"] = ("--poll-interval", args.poll_interval)
    if args.max_subcompactions is not None:
        changes["max_subcompactions"] = args.max_subcompactions
        flags["max_subcompactions"] = ("--max-subcompactions", str(args.max_subcompactions))
    if changes:
        with named_as_typed(flags):
            opts = replace(opts, **changes)
    # Without --once it serves from its claim on: a standby polling before run() must not
    # take it for a one-off run and fence it (a restarted run-compactor was fenced so).
    c = Compactor.open(args.path, opts, settings=settings, takeover=args.takeover, serve=not args.once)
    try:
        if args.once:
            with out.progress("compaction", unit="bytes") as progress:
                r = c.run_once(progress=progress)
            _emit_line(out, r.to_dict(), _compaction_line(r))
            return None
        if not out.as_json:
            if c.holder is not None:
                out.line(
                    f"compactor standing by: {c.holder.describe()} holds the role; it takes over "
                    "if that one's lease lapses (Ctrl-C to stop)"
                )
            else:
                out.line(f"compactor running with epoch {c.epoch} (Ctrl-C to stop)")
        with _stop_on_signals(c.stop):
            c.run(on_report=lambda r: _emit_line(out, r.to_dict(), _compaction_line(r)))
        return None
    except FencedError as exc:
        # Not a failure of this process: another compactor holds the role now. A distinct
        # status (and no traceback) so a supervisor or operator can tell it from a crash.
        sys.stderr.write(f"shaledb: run-compactor stopped, fenced: {exc}\n")
        return EXIT_FENCED
    finally:
        # Gives the role back: a writer's embedded compactor this one fenced resumes.
        c.close()


def _gc_line(r: GcReport) -> str:
    c = r.counts()
    verb = "would delete" if r.dry_run else "deleted"
    return (
        f"manifest {r.manifest_id}: {verb} {counted(c['manifest'], 'manifest')}, "
        f"{counted(c['wal'], 'WAL object')}, {counted(c['sst'], 'SST')}, "
        f"{counted(c['journal'], 'journal object')}, {counted(c['tmp'], 'temporary object')}, "
        f"{counted(c['job'], 'job lease')} ({human_size(r.bytes_deleted)}); "
        f"{counted(c['checkpoints'], 'checkpoint')} expired; {counted(r.fences_kept, 'fence')} kept; "
        f"active manifests {id_list(r.active_manifests)}"
        + (
            f"; {counted(r.in_flight_kept, 'SST')} of a flush in flight kept (younger than the "
            f"{format_duration(UNCOMMITTED_MIN_AGE_S)} floor, whatever --min-age says)"
            if r.in_flight_kept
            else ""
        )
        + (
            "; a backup is copying into this database: unreferenced objects kept until it ends"
            if r.backup_in_progress
            else ""
        )
        + ("; the destroyed database was deleted" if r.destroyed else "")
        + ("; the clone was detached from its parents" if r.detached else "")
    )


def _gc_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--once", action="store_true", help="one pass, then exit")
    p.add_argument("--dry-run", action="store_true", help="list what would be deleted; delete nothing")
    p.add_argument(
        "--min-age", default=None, metavar="SECONDS", help=f"minimum object age to delete ({SECONDS_HELP})"
    )
    p.add_argument(
        "--interval", default=None, metavar="SECONDS", help=f"time between passes ({SECONDS_HELP})"
    )
    p.add_argument(
        "--list", action="store_true", help="print every path deleted (or, with --dry-run, to delete)"
    )


@command("run-gc", "delete objects no active manifest or live checkpoint references")(_gc_args)
def run_gc(args: argparse.Namespace, out: Output) -> int | None:
    settings = cli_settings(args)  # [garbage_collector] and SHALEDB_GARBAGE_COLLECTOR__*, as above
    changes: dict[str, Any] = {"dry_run": True} if args.dry_run else {}
    flags: dict[str, tuple[str, str]] = {}
    if args.min_age is not None:
        changes["min_age_s"] = seconds_option(args.min_age, "--min-age")
        flags["min_age_s"] = ("--min-age", args.min_age)
    if args.interval is not None:
        changes["interval_s"] = seconds_option(args.interval, "--interval")
        flags["interval_s"] = ("--interval", args.interval)
    with named_as_typed(flags):
        options = replace(settings.garbage_collector or GcOptions(), **changes)
    gc = GarbageCollector.open(args.path, options, settings=settings)

    def show(r: GcReport) -> None:
        _emit_line(out, r.to_dict(), _gc_line(r))
        if args.list and not out.as_json:
            for cls, items in r.deleted.items():
                for path in items:
                    out.stream.write(f"  {cls:8s} {path}\n")

    if args.once or options.dry_run:
        show(gc.run_once())
        return None
    if not out.as_json:  # as run-compactor does: a silent start looked like a hang for minutes
        o = gc.options
        out.line(
            f"garbage collector running: a pass every {format_duration(o.interval_s)}, deleting "
            f"garbage older than {format_duration(o.min_age_s)}; a line per pass that deletes "
            "something (Ctrl-C to stop)"
        )
    with _stop_on_signals(gc.stop):
        while not gc._stop.is_set():
            r = gc.run_pass()  # a store outage: logged, and the next pass runs on schedule
            if r is None:
                SYSTEM_CLOCK.wait(gc._stop, gc.options.interval_s)
                continue
            if (
                r.destroyed
                or r.detached
                or r.checkpoints_expired
                or r.in_flight_kept
                or r.backup_in_progress
                or any(r.deleted.values())
            ):
                show(r)  # a line per pass that did something (an idle pass a minute was noise)
            if r.destroyed:
                break
            SYSTEM_CLOCK.wait(gc._stop, gc.options.interval_s)
    return None
