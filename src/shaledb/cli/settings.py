"""CLI settings: where commands that open a writer get theirs, and ``shaledb settings``.

Commands read settings as a service does (``shaledb.settings_load``): the
defaults, then the TOML file named by ``--settings`` or ``SHALEDB_SETTINGS_FILE``,
then ``SHALEDB_*`` variables, then what the command itself must fix (CLI work
runs without the embedded compactor and collector).
"""

from __future__ import annotations

import argparse
from typing import Any

from ..settings import Settings
from ..store.base import ObjectStore
from .output import Output, command


def cli_settings(args: argparse.Namespace, **overrides: Any) -> Settings:
    """The settings a command opens a writer with."""
    from ..settings_load import load_settings

    return load_settings(Settings, path=getattr(args, "settings_file", None), **overrides)


def _settings_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--defaults", action="store_true", help="print the defaults, not the effective settings")
    p.set_defaults(no_path=True)


@command("settings", "print settings as TOML: the effective ones (file + environment) or --defaults")(
    _settings_args
)
def settings(args: argparse.Namespace, out: Output) -> int | None:
    s = Settings() if args.defaults else cli_settings(args)
    if out.as_json:
        out.emit(s.to_dict())
    else:
        out.stream.write(s.to_toml())
    return None


def _wal_objects(store: ObjectStore) -> list[int]:
    """The sizes of the WAL objects present (one LIST per 1,000)."""
    from ..format import paths

    return [meta.size for meta in store.list(paths.WAL_DIR) if paths.parse_wal_id(meta.path) is not None]


def _stats_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-wal", action="store_true", help="skip listing WAL objects (one LIST per 1,000)")


@command(
    "stats", "database figures: LSM shape and sizes, WAL objects, sequence numbers, store requests made"
)(_stats_args)
def stats(args: argparse.Namespace, out: Output) -> int | None:
    """Figures a dashboard wants, read through a reader (never fences the writer).

    A running writer's own counters and histograms are ``Db.metrics()`` in its
    process (exported with ``shaledb.store.metrics.PrometheusCollector``); this reads
    what the store shows.
    """
    import random
    from concurrent.futures import Future, wait

    from ..clock import SYSTEM_CLOCK
    from ..db.reader import DbReader, DbReaderOptions
    from ..store.parallel import completed, in_background
    from ..store.stack import open_stack
    from ..store.wrappers import InstrumentedStore, find_wrapper

    # Figures from the manifest and a WAL listing: no SST's index or filter is needed.
    opts = DbReaderOptions(
        establish_checkpoint=False,
        background_poll=False,
        checkpoint_lifetime_s=None,
        pin_metadata_on_open=False,
    )
    # The WAL listing needs nothing the open reads (the manifest list and GET, the WAL
    # probes), so it runs meanwhile on the same store: on a slow store the command took one
    # round trip per request in a row, the listing last.
    base = Settings(retry=opts.retry, compactor=None, garbage_collector=None)
    store = open_stack(args.path, None, None, base, SYSTEM_CLOCK, random.Random())
    try:
        listing: Future[list[int] | None] = (
            completed(None)
            if args.no_wal
            else in_background(lambda: _wal_objects(store), name="shaledb-stats")
        )
        try:
            with DbReader.open(args.path, store=store, options=opts) as r:
                m = r.manifest
                ssts = list(m.data.ssts())
                data: dict[str, Any] = {
                    "manifest_id": m.id,
                    "writer_epoch": m.writer_epoch,
                    "seq": r.seq,
                    "last_l0_seq": m.last_l0_seq,
                    "l0_ssts": len(m.data.l0),
                    "sorted_runs": len(m.data.runs),
                    "ssts": len(ssts),
                    "sst_bytes": sum(s.size for s in ssts),
                    "entries": sum(s.entries for s in ssts),
                    "next_wal_id": m.next_wal_id,
                    "replay_after_wal_id": m.replay_after_wal_id,
                    "checkpoints": len(m.checkpoints),
                    "journal_files": len(m.journal),
                }
            wal = listing.result()
        finally:
            wait([listing])  # (an open that failed: its error is the one to report)
        if wal is not None:
            data["wal_objects"] = len(wal)
            data["wal_bytes"] = sum(wal)
        inst = find_wrapper(store, InstrumentedStore)
        if inst is not None:
            data["store_requests"] = inst.snapshot().total_requests
    finally:
        store.close()
    out.emit(data, title=None if out.as_json else f"database {args.path}")
    return None
