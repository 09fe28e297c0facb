"""CLI commands added for the first hour of a new user: ``delete``, ``delete-range``."""

from __future__ import annotations

import argparse

from ..errors import InvalidArgument
from ..settings import Settings
from .output import Output, command, parse_bytes
from .settings import cli_settings


def _settings(args: argparse.Namespace) -> Settings:
    """A delete writes to an existing database only (a missing one is NotFound, exit 3, not a new
    empty database), with the settings every writing command reads (--settings, SHALEDB_*)."""
    return cli_settings(args, compactor=None, garbage_collector=None)


def _delete_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("key", metavar="KEY", help="key (UTF-8; 0x... for hex; text:... for literal text)")


@command("delete", "delete one key durably (opens the writer: fences any running writer)")(_delete_args)
def delete(args: argparse.Namespace, out: Output) -> int | None:
    from ..db.writer import Db

    with Db.open(args.path, settings=_settings(args), create_if_missing=False) as db:
        h = db.delete(parse_bytes(args.key))
    out.emit({"key": args.key, "deleted": True, "seq": h.seq})
    return None


def _delete_range_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "start", metavar="START", help="first key removed (UTF-8; 0x... for hex; text:... for literal text)"
    )
    p.add_argument("end", metavar="END", help="end of the range, not removed itself (same spelling)")


@command(
    "delete-range",
    "delete every key in [START, END) durably, one range tombstone (opens the writer: fences a running one)",
)(_delete_range_args)
def delete_range(args: argparse.Namespace, out: Output) -> int | None:
    """The range is checked before the writer opens: ``START > END`` was refused only after
    opening it, which fenced a running writer for a command that wrote nothing. ``START ==
    END`` is an empty range, which ``Db.delete_range`` accepts and writes nothing for: the
    command said ``deleted_range True`` with a sequence number; it now says nothing was
    deleted, and opens no writer (so fences none), only checks the database is there."""
    from ..db.batch import check_range
    from ..db.writer import Db

    start, end = check_range(parse_bytes(args.start), parse_bytes(args.end))
    if start == end:
        _check_exists(args.path)
        out.emit({"start": args.start, "end": args.end, "deleted_range": False, "note": EMPTY_RANGE})
        return None
    with Db.open(args.path, settings=_settings(args), create_if_missing=False) as db:
        h = db.delete_range(start, end)
    out.emit({"start": args.start, "end": args.end, "deleted_range": True, "seq": h.seq})
    return None


EMPTY_RANGE = "empty range (START == END): nothing deleted, nothing written"


def _check_exists(path: str) -> None:
    """NotFound or DatabaseDestroyed, as opening the writer would raise, without opening it."""
    from ..manifest.edits import destroyed
    from .core import manifest_store

    ms = manifest_store(path)
    m = ms.require_latest()
    if m.destroyed_at_s is not None:
        raise destroyed(ms.store.describe(), m)


def bench_guard(path: str, scratch_prefix: str | None, force: bool) -> bytes:
    """The key prefix ``bench`` may write under at ``path``, or InvalidArgument.

    ``bench`` opens the writer, which fences a running one, and writes
    thousands of keys: on an existing database it needs ``--force`` (no
    writer runs, or fencing it is fine), and on one holding data also a
    ``--scratch-prefix`` under which no key exists yet (its keys are deleted
    afterwards). A new location needs neither.
    """
    import random

    from ..clock import SYSTEM_CLOCK
    from ..db.reader import DbReader, DbReaderOptions
    from ..manifest.store import ManifestStore
    from ..store.url import open_store

    prefix = parse_bytes(scratch_prefix) if scratch_prefix is not None else b"bench:"
    if not prefix:
        raise InvalidArgument("--scratch-prefix must not be empty")
    latest = ManifestStore(open_store(path), SYSTEM_CLOCK, random.Random(), author="cli").read_latest()
    if latest is None:
        return prefix
    if not force:
        raise InvalidArgument(
            f"{path} is an existing database: bench opens its writer, which fences a running writer. "
            "Pass --force if none runs (and --scratch-prefix if it holds data), or bench a new location"
        )
    opts = DbReaderOptions(establish_checkpoint=False, background_poll=False)
    with DbReader.open(path, options=opts) as r:
        with r.scan(limit=1) as it:
            has_data = next(iter(it), None) is not None
        if has_data and scratch_prefix is None:
            raise InvalidArgument(
                f"{path} holds data and bench writes many keys: give --scratch-prefix PREFIX "
                "(keys are written under it and deleted afterwards), or bench a new location"
            )
        with r.scan(prefix=prefix, limit=1) as it:
            if next(iter(it), None) is not None:
                raise InvalidArgument(
                    f"keys under the scratch prefix {scratch_prefix!r} exist in {path}: choose an unused one"
                )
    return prefix
