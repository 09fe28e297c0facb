"""``shaledb changes``: the change feed (``shaledb.engine.changes``) on the command line.

What a consumer of the feed sees, for debugging one or following a database from a shell:
every committed write in order from the WAL -- puts, deletes, merges (the operand) and range
deletes (with their end key) -- each with the cursor to resume after it. It reads the store
only, like a reader: no writer is opened and nobody is fenced. Without ``--follow`` it lists
what is committed now (a table sized from its first rows, or a JSON array); with it, each
change is written as one line the moment it is read (JSON lines with ``--json``), so
``shaledb changes --follow | grep`` and ``| head`` work; Ctrl-C stops it. A follower also
stops (exit 0) as soon as the reader of its output goes away, as ``tail -f`` does: ``| head -1``
ends when ``head`` has its line, not at the next write, which on a quiet database never comes.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import select
import threading
from collections.abc import Callable, Iterator
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


@contextlib.contextmanager
def _stop_when_reader_leaves(stream: Any, stop: Callable[[], None]) -> Iterator[None]:
    """Call ``stop`` once the read end of ``stream``'s pipe is closed (or its terminal hangs up).

    A follower waiting for the next write never writes, so it never meets EPIPE: before, ``shaledb
    changes --follow | head -1`` kept the shell waiting after ``head`` had printed its line, until
    the database's next write (forever on a quiet one). A poll with no events asked still reports
    POLLERR (pipe reader gone) and POLLHUP; files and open pipes report nothing.
    """
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        fd = -1  # a test's StringIO: no reader to lose
    if fd < 0 or not hasattr(select, "poll"):
        yield
        return
    done = threading.Event()

    def watch() -> None:
        poller = select.poll()
        poller.register(fd, 0)
        while not done.is_set():
            if poller.poll(250):
                stop()
                return

    watcher = threading.Thread(target=watch, name="shaledb-changes-stdout", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()


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
        if not args.follow:
            stream_rows(out, rows, COLUMNS)
            return None
        with _stop_when_reader_leaves(out.stream, feed.stop):  # (a follower's rows never end)
            follow_rows(out, rows, COLUMNS)
    return None
