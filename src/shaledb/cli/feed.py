"""``shaledb changes``: the change feed (``shaledb.engine.changes``) on the command line.

What a consumer of the feed sees, for debugging one or following a database from a shell:
every committed write in order from the WAL -- puts, deletes, merges (the operand) and range
deletes (with their end key) -- each with the cursor to resume after it. It reads the store
only, like a reader: no writer is opened and nobody is fenced. Without ``--follow`` it lists
what is committed now (a table sized from its first rows, or a JSON array); with it, each
change is written as one line the moment it is read (JSON lines with ``--json``), so
``shaledb changes --follow | grep`` and ``| head`` work; Ctrl-C stops it.
"""

from __future__ import annotations

import argparse
import itertools
from typing import Any

from ..engine.changes import Change, open_changes
from ..errors import NotFound, named_as_typed
from ..numbers import check_int, check_number
from .core import manifest_store
from .options import SECONDS_HELP, seconds_option
from .output import Output, command, render_bytes
from .stream import follow_rows, stream_rows

COLUMNS = ("seq", "kind", "key", "value", "end", "cursor")


def _row(c: Change) -> dict[str, Any]:
    return {
        "seq": c.seq,
        "kind": c.kind,
        "key": render_bytes(c.key),
        "value": None if c.value is None else render_bytes(c.value),
        "end": None if c.end is None else render_bytes(c.end),
        "cursor": str(c.cursor),
    }


def _changes_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--since",
        help='start after this cursor (c1..., as printed), or "latest" for new writes only '
        "(default: the oldest history the WAL still holds)",
    )
    p.add_argument("--follow", "-f", action="store_true", help="keep waiting for new writes (Ctrl-C stops)")
    p.add_argument("--limit", type=int, help="stop after this many changes")
    p.add_argument(
        "--poll",
        default=0.5,
        metavar="SECONDS",
        help=f"time between looks for new writes, --follow ({SECONDS_HELP})",
    )


@command(
    "changes",
    "committed writes in order from the WAL, each with the cursor to resume after it (reads only)",
)(_changes_args)
def changes(args: argparse.Namespace, out: Output) -> int | None:
    if args.limit is not None:
        check_int("--limit", args.limit, minimum=0)
    with named_as_typed({"--poll": ("--poll", args.poll)} if isinstance(args.poll, str) else {}):
        poll = check_number(
            "--poll", seconds_option(args.poll, "--poll"), above_minimum=True, maximum=3600, unit="seconds"
        )
    if args.follow:
        # A followed table's header is written before the first change arrives; without this
        # check a missing database printed the header on stdout, then the error.
        ms = manifest_store(args.path)
        if ms.read_latest() is None:
            raise NotFound(f"no database at {ms.store.describe()}")
    with open_changes(args.path, args.since, follow=args.follow, poll_interval_s=poll) as feed:
        rows = (_row(c) for c in itertools.islice(feed, args.limit))
        write = follow_rows if args.follow else stream_rows  # (a follower's rows never end)
        write(out, rows, COLUMNS)
    return None
