"""CLI commands for checkpoints, clones, destroy, and reads through a DbReader.

``get`` and ``scan`` never open a writer (that would fence the running one):
they read through a :class:`~shaledb.db.reader.DbReader` -- on ``--checkpoint``
if given, else on the latest version (``get`` without writing anything,
``scan`` under a short-lived checkpoint of its own so a long scan is not
undercut by the garbage collector).

Exit codes (``shaledb.cli``): 0 success, 1 error, 2 usage, 3 not found (no
database, no such checkpoint, key absent).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from typing import Any

from .. import admin
from ..clock import SYSTEM_CLOCK
from ..db.reader import DbReader, DbReaderOptions
from ..db.writer import Db
from ..duration import format_duration
from ..errors import InvalidArgument
from ..manifest.model import Checkpoint, Manifest
from ..numbers import check_seconds
from ..settings import GcOptions
from .options import checkpoint_ref, resolve_checkpoint, seconds_option
from .output import EXIT_NOT_FOUND, Output, command, parse_bytes, render_bytes
from .settings import cli_settings
from .stream import stream_rows


def _when(ts: float | None) -> str | None:
    if ts is None:
        return None
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="seconds")


def _kind(c: Checkpoint) -> str:
    if c.writer_epoch is not None:
        return "writer"
    role = dict(c.metadata).get("role")
    return role or "user"


def describe_checkpoint(c: Checkpoint, now: float) -> dict[str, Any]:
    """A checkpoint as plain data (the CLI's JSON and table rows)."""
    left = None if c.expire_time_s is None else c.expire_time_s - now
    return {
        "id": str(c.id),
        "manifest_id": c.manifest_id,
        "name": c.name,
        "kind": _kind(c),
        "created": _when(c.create_time_s),
        "expires": _when(c.expire_time_s),
        "expires_in": None if left is None else ("expired" if left <= 0 else format_duration(left)),
        "expired": c.expired(now),
        "writer_epoch": c.writer_epoch,
        "metadata": dict(c.metadata),
    }


_CP_COLUMNS = ["id", "manifest_id", "name", "kind", "created", "expires_in"]


def _lifetime(text: str | None) -> dt.timedelta | None:
    """``--lifetime``'s value; a negative one is refused naming the option (a checkpoint
    cannot expire before it is made). Read as the other options of seconds are
    (:func:`seconds_option`): a word that is neither seconds nor a duration, and a value out of
    range (``0``, ``inf``, ``nan``, ``1e400``), are refused naming ``--lifetime``; they said
    "cannot parse duration 'inf'" and "checkpoint lifetime must be ... (or None for no
    expiry)", naming neither the option nor a way to type no expiry."""
    if text is None:
        return None
    if text.strip().startswith("-"):
        raise InvalidArgument(f"--lifetime must be positive: got {text}")
    typed = seconds_option(text, "--lifetime")  # (a word that is neither: refused, naming it)
    try:
        seconds = check_seconds("--lifetime", typed)
    except InvalidArgument as exc:
        raise InvalidArgument(f"{exc} (leave --lifetime out for no expiry)") from None
    return dt.timedelta(seconds=seconds)


checkpoint_id = checkpoint_ref  # a UUID or a name, resolved by the API (shaledb.admin.find_checkpoint)


# ------------------------------------------------------------ checkpoints


def _create_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-l",
        "--lifetime",
        help='how long the checkpoint lives, e.g. "7days 30min 10s" (default: no expiry; delete it yourself)',
    )
    p.add_argument(
        "-s", "--source", type=checkpoint_id, help="pin the version of this checkpoint (UUID or name)"
    )
    p.add_argument("-n", "--name", help="a label (names need not be unique)")


@command("create-checkpoint", "create a checkpoint pinning the current version (or a source checkpoint's)")(
    _create_args
)
def create_checkpoint(args: argparse.Namespace, out: Output) -> int | None:
    cp = admin.create_checkpoint(
        args.path,
        lifetime=_lifetime(args.lifetime),
        source=args.source,  # (a UUID or a name: the API resolves it, in the manifest it updates)
        name=args.name,
    )
    out.emit(describe_checkpoint(cp, SYSTEM_CLOCK.now()))
    return None


def _refresh_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-i", "--id", required=True, type=checkpoint_id, help="the checkpoint's UUID or name")
    p.add_argument("-l", "--lifetime", help='new lifetime from now, e.g. "1h" (default: no expiry)')


@command("refresh-checkpoint", "set a live checkpoint's expiry to now + lifetime")(_refresh_args)
def refresh_checkpoint(args: argparse.Namespace, out: Output) -> int | None:
    cp = admin.refresh_checkpoint(args.path, args.id, lifetime=_lifetime(args.lifetime))
    out.emit(describe_checkpoint(cp, SYSTEM_CLOCK.now()))
    return None


def _delete_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-i", "--id", required=True, type=checkpoint_id, help="the checkpoint's UUID or name")
    p.add_argument(
        "--force", action="store_true", help="also a checkpoint a clone holds (only when that clone is gone)"
    )


@command("delete-checkpoint", "delete a checkpoint")(_delete_args)
def delete_checkpoint(args: argparse.Namespace, out: Output) -> int | None:
    cp_id = resolve_checkpoint(args.path, args.id)
    assert cp_id is not None
    admin.delete_checkpoint(args.path, cp_id, force=args.force)
    out.emit({"deleted": cp_id})
    return None


def _list_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--name", help="only checkpoints with this name")
    p.add_argument("--live", action="store_true", help="hide expired checkpoints")


@command("list-checkpoints", "list the database's checkpoints")(_list_args)
def list_checkpoints(args: argparse.Namespace, out: Output) -> int | None:
    cps = admin.list_checkpoints(args.path, name=args.name, include_expired=not args.live)
    now = SYSTEM_CLOCK.now()
    out.emit([describe_checkpoint(c, now) for c in cps], columns=_CP_COLUMNS)
    return None


# ------------------------------------------------------- clone and destroy


def _clone_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--parent", required=True, help="URL of the database to clone")
    p.add_argument(
        "--checkpoint",
        type=checkpoint_id,
        help="clone the version this parent checkpoint (UUID or name) pins (default: current)",
    )


@command("clone", "create (or finish creating) a clone of --parent at --path, sharing its SSTs")(_clone_args)
def clone(args: argparse.Namespace, out: Output) -> int | None:
    """A finished clone is reported as it is: opening it (``Db.open_from_checkpoint`` opens the
    writer of one that exists) fenced the clone's running writer whenever a script ran
    ``clone`` again to make sure it exists, and ``--checkpoint`` naming another version than
    the clone's was ignored (exit 0, the old clone's figures)."""
    m = _finished_clone(args)
    created = m is None
    if m is None:
        settings = cli_settings(args, compactor=None, garbage_collector=None)
        with Db.open_from_checkpoint(args.path, args.parent, args.checkpoint, settings=settings) as db:
            m = db.manifest
    out.emit(
        {
            "path": args.path,
            "parent": m.parent.url if m.parent else None,
            "parent_checkpoint": str(m.parent.checkpoint_id) if m.parent else None,
            "manifest_id": m.id,
            "writer_epoch": m.writer_epoch,
            "ancestors": [e.url for e in m.external_dbs],
            "created": created,
        }
    )
    return None


def _finished_clone(args: argparse.Namespace) -> Manifest | None:
    """The latest manifest at ``--path`` when it is a finished clone of ``--parent`` (of the
    version ``--checkpoint`` pins, when that is still known), else None: nothing there yet, an
    unfinished clone, or a database that creating the clone refuses (it says why)."""
    from ..admin.checkpoint import live_checkpoint
    from ..admin.clone import CLONED_FROM_OPTION
    from ..engine.parents import canonical_url
    from ..errors import CheckpointNotFound
    from .core import manifest_store

    m = manifest_store(args.path).read_latest()
    if m is None or not m.initialized:
        return None
    parent = canonical_url(args.parent)
    if m.parent is None:  # detached from its parent since (or no clone: refused by the create)
        return m if m.option(CLONED_FROM_OPTION) == parent else None
    if canonical_url(m.parent.url) != parent:
        return None
    if args.checkpoint is not None:
        pm = manifest_store(args.parent).read_latest()
        held = None if pm is None else pm.checkpoint(m.parent.checkpoint_id)
        try:
            wanted = (
                None if pm is None else live_checkpoint(pm, args.checkpoint, SYSTEM_CLOCK.now(), args.parent)
            )
        except CheckpointNotFound:
            wanted = None  # deleted since the clone was made: nothing to compare
        if held is not None and wanted is not None and held.manifest_id != wanted.manifest_id:
            raise InvalidArgument(
                f"{args.path} is already a clone of {args.parent} at its version {held.manifest_id}, and "
                f"checkpoint {args.checkpoint} pins version {wanted.manifest_id}: clone that one into a new "
                "location"
            )
    return m


def _destroy_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--hard",
        action="store_true",
        help="delete every object now (refused while checkpoints are live); default: mark it destroyed, "
        "fence the writer and let the garbage collector delete it after its grace period",
    )


@command("destroy", "destroy the database (soft by default; see --hard)")(_destroy_args)
def destroy(args: argparse.Namespace, out: Output) -> int | None:
    admin.destroy(args.path, soft=not args.hard)
    info: dict[str, Any] = {"destroyed": args.path, "mode": "hard" if args.hard else "soft"}
    if not args.hard:
        # A soft destroy deletes nothing yet: say who does, and when (an operator saw run-gc
        # report "deleted 0 ..." and no word of the day-long grace).
        grace = GcOptions().db_delete_grace_s
        info["objects"] = (
            f"deleted by the garbage collector (run-gc, or a writer's) once "
            f"GcOptions.db_delete_grace_s ({format_duration(grace)} by default) has passed and no "
            "checkpoint is live; destroy --hard deletes them now"
        )
    out.emit(info)
    return None


# ------------------------------------------------------------------ reads


def _reader(path: str, checkpoint: str | None, *, for_scan: bool) -> DbReader:
    if checkpoint is not None:
        return DbReader.open(path, checkpoint)
    opts = DbReaderOptions(
        establish_checkpoint=for_scan,
        background_poll=for_scan,
        manifest_poll_interval_s=10.0,
        checkpoint_lifetime_s=300.0,
        checkpoint_name="cli-scan",
        block_cache_bytes=8 << 20,  # a scan reads each block once: a cache would only grow the RSS
        pin_metadata_on_open=for_scan,  # a get or head reads the few SSTs its key needs
    )
    return DbReader.open(path, options=opts)


def _kv(key: bytes, value: bytes | None) -> dict[str, Any]:
    return {
        "key": render_bytes(key),
        "value": None if value is None else render_bytes(value),
        "key_hex": key.hex(),
        "value_hex": None if value is None else value.hex(),
    }


_AS_OF_HELP = (
    "read as of a sequence number (an integer) or a time (ISO 8601 with a zone, e.g. "
    "2026-11-27T12:00:00Z), within the writer's history_retention_s"
)


def _as_of(text: str) -> dict[str, Any]:
    """``--as-of``: snapshot keywords for a sequence number or an aware ISO time."""
    if text.isdigit():
        return {"at_seq": int(text)}
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError as exc:
        raise InvalidArgument(f"--as-of takes a sequence number or an ISO 8601 time, got {text!r}") from exc
    if when.tzinfo is None:
        raise InvalidArgument(f"--as-of {text!r} has no time zone: add one (e.g. Z or +00:00)")
    return {"at_time": when}


def _get_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("key", help="key (UTF-8; 0x... for hex; text:... for literal text)")
    p.add_argument(
        "--checkpoint", type=checkpoint_id, help="read the version this checkpoint (UUID or name) pins"
    )
    p.add_argument("--as-of", dest="as_of", help=_AS_OF_HELP)


@command("get", "read one key (through a reader: never fences the writer)")(_get_args)
def get(args: argparse.Namespace, out: Output) -> int | None:
    key = parse_bytes(args.key)
    as_of = None if args.as_of is None else _as_of(args.as_of)
    with _reader(args.path, args.checkpoint, for_scan=False) as r:
        if as_of is None:
            value = r.get(key)
        else:
            with r.snapshot(**as_of) as snap:
                value = snap.get(key)
    if out.as_json:
        out.emit(_kv(key, value))
    elif value is not None:
        out.line(render_bytes(value))
    if value is None:
        if not out.as_json:
            sys.stderr.write(f"shaledb: key not found: {args.key}\n")
        return EXIT_NOT_FOUND
    return None


def _scan_args(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--prefix", help="only keys starting with this (UTF-8 or 0x-hex)")
    g.add_argument("--from", dest="start", help="first key (inclusive)")
    p.add_argument("--to", dest="end", help="end key (exclusive)")
    p.add_argument("--limit", type=int, help="at most this many pairs")
    p.add_argument("--reverse", action="store_true", help="descending key order")
    p.add_argument("--count", action="store_true", help="print only the number of pairs")
    p.add_argument(
        "--checkpoint", type=checkpoint_id, help="read the version this checkpoint (UUID or name) pins"
    )
    p.add_argument("--as-of", dest="as_of", help=_AS_OF_HELP)


@command("scan", "list key/value pairs in key order (through a reader: never fences the writer)")(_scan_args)
def scan(args: argparse.Namespace, out: Output) -> int | None:
    if args.prefix is not None and args.end is not None:
        raise InvalidArgument("--to cannot be combined with --prefix")
    if args.limit is not None and args.limit < 0:
        raise InvalidArgument("--limit must be >= 0")
    prefix = None if args.prefix is None else parse_bytes(args.prefix)
    start = None if args.start is None else parse_bytes(args.start)
    end = None if args.end is None else parse_bytes(args.end)
    as_of = None if args.as_of is None else _as_of(args.as_of)
    with (
        _reader(args.path, args.checkpoint, for_scan=True) as r,
        r.snapshot(**(as_of or {})) as snap,
    ):
        it = snap.scan(start, end, prefix=prefix, reverse=args.reverse, limit=args.limit)
        if args.count:
            out.emit({"count": sum(1 for _ in it)})
            return None
        stream_rows(out, (_kv(k, v) for k, v in it), ["key", "value"])  # constant memory
    return None
