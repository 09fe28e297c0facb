"""CLI commands of the value journal: ``compact-journal``, ``rebuild-ledger``, ``backup``, ``head``,
``index-query``.

``compact-journal`` runs without a writer (it commits with a manifest CAS that
a running writer and compactor retry around); ``rebuild-ledger`` opens the
database as its writer (fencing a running one); ``backup DEST`` pins a
checkpoint of every durable write and copies what the destination lacks.
"""

from __future__ import annotations

import argparse
import random
from typing import Any

from ..clock import SYSTEM_CLOCK
from ..db.reader import DbReader, DbReaderOptions
from ..db.writer import Db
from ..engine.indexes import term_range
from ..errors import InvalidArgument, NotFound
from ..journal.backup import backup_url
from ..journal.compaction import StandaloneHost, compact_journal
from ..manifest.store import ManifestStore
from ..numbers import check_int, human_size
from ..store.stack import wrap_store
from ..store.url import open_store
from .output import Output, command, parse_bytes, render_bytes
from .settings import cli_settings
from .stream import stream_rows


def _settings(args: argparse.Namespace) -> Any:
    """Writer settings for CLI work: no embedded compactor or collector."""
    return cli_settings(args, compactor=None, garbage_collector=None)


def _compact_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-runs", type=int, default=None, metavar="N", help="compact at most N runs")
    p.add_argument("--scores", action="store_true", help="print every journal object's score")


@command("compact-journal", "score the value journal and rewrite the most rewarding runs of objects")(
    _compact_args
)
def compact_journal_cmd(args: argparse.Namespace, out: Output) -> int | None:
    if args.max_runs is not None:
        check_int("--max-runs", args.max_runs, minimum=0)  # -1 compacted nothing and said so
    settings = _settings(args)
    rng = random.Random()
    store = wrap_store(open_store(args.path), settings, SYSTEM_CLOCK, rng)
    if ManifestStore(store, SYSTEM_CLOCK, rng, author="cli").read_latest() is None:
        raise NotFound(f"no database at {store.describe()}")
    host = StandaloneHost(store, settings=settings, clock=SYSTEM_CLOCK, rng=rng)
    r = compact_journal(host, max_runs=args.max_runs)
    if out.as_json:
        out.emit(r.to_dict())
        return None
    if args.scores:
        out.table(
            [{"object": s.id, "db": s.db, "size": human_size(s.size), "score": s.score} for s in r.scores],
            ["object", "db", "size", "score"],
        )
    out.line(
        f"manifest {r.manifest_id} ({r.strategy}): {len(r.scores)} journal objects scored, "
        f"{len(r.runs)} runs compacted; {human_size(r.bytes_read)} rewritten into "
        f"{human_size(r.bytes_rewritten)} ({human_size(r.bytes_reclaimed)} to reclaim by GC); "
        f"{r.ledger_ssts_rewritten} ledger SSTs repointed"
    )
    return None


def _rebuild_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--force",
        action="store_true",
        help="rebuild even if the journal does not hold every write (data not in it is dropped)",
    )


@command("rebuild-ledger", "rebuild the ledger (data and index trees) from the value journal")(_rebuild_args)
def rebuild_ledger_cmd(args: argparse.Namespace, out: Output) -> int | None:
    with Db.open(args.path, settings=_settings(args), create_if_missing=False) as db:
        r = db.rebuild_ledger(force=args.force)
    out.emit(r, title=None if out.as_json else "ledger rebuilt from the journal")
    return None


def _backup_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("dest", metavar="DEST", help="URL of the backup database")
    p.add_argument("--no-prune", action="store_true", help="keep objects the backup no longer needs")


@command("backup", "incremental, consistent backup of the database to DEST (opens as a database)")(
    _backup_args
)
def backup_cmd(args: argparse.Namespace, out: Output) -> int | None:
    if str(args.dest).lower().startswith("memory:"):
        # It copied, printed "manifest written" and exited 0, and the backup went with the
        # process (a memory store lives only in the process that made it).
        raise InvalidArgument(
            f"backup DEST {args.dest} is a memory:// store, which lives only in this process: the "
            "backup would be gone when the command exits; back up to a directory or s3://, gs://, az://"
        )
    with out.progress("backup", unit="bytes") as progress:
        r = backup_url(args.path, args.dest, prune=not args.no_prune, progress=progress)
    if out.as_json:
        out.emit(r.to_dict())
        return None
    out.line(
        f"backup of manifest {r.source_manifest_id} to {args.dest}: {r.objects} objects, "
        f"{r.copied} copied ({human_size(r.bytes_copied)}{', server-side' if r.server_side else ''}), "
        f"{r.already_present} already there; manifest "
        f"{'written as ' + str(r.dest_manifest_id) if r.manifest_written else 'unchanged'}"
        + (f"; {r.pruned} stale objects removed" if r.pruned else "")
    )
    return None


def _head_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("key", metavar="KEY", help="key (UTF-8; 0x... for hex; text:... for literal text)")


@command("head", "a key's metadata from the ledger (sequence number, size, expiry, index terms)")(_head_args)
def head_cmd(args: argparse.Namespace, out: Output) -> int | None:
    with DbReader.open(
        args.path, options=DbReaderOptions(establish_checkpoint=False, background_poll=False)
    ) as r:
        h = r.head(parse_bytes(args.key))
    if h is None:
        raise NotFound(f"no key {args.key}")
    out.emit(
        {
            "seq": h.seq,
            "value_size": h.value_size,
            "metadata": None if h.metadata is None else render_bytes(h.metadata),
            "expires_at": h.expires_at,
            "indexes": {f: [render_bytes(t) for t in ts] for f, ts in h.indexes.items()},
            "in_journal": h.in_journal,
        }
    )
    return None


def _query_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("field", metavar="FIELD", help="the indexed field (as named in put(..., indexes=...))")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--from", dest="start", default=None, help="first term (inclusive)")
    p.add_argument("--to", dest="end", default=None, help="end term (exclusive, as scan's --to)")
    g.add_argument("--term", default=None, help="exactly this term (not with --from/--to)")
    p.add_argument("--regex", default=None, help="keep terms matching this regular expression")
    p.add_argument("--limit", type=int, default=None, help="at most this many keys")


@command("index-query", "keys by secondary-index term, in term order")(_query_args)
def index_query_cmd(args: argparse.Namespace, out: Output) -> int | None:
    with DbReader.open(
        args.path, options=DbReaderOptions(establish_checkpoint=False, background_poll=False)
    ) as r:
        start = None if args.start is None else parse_bytes(args.start)
        end = None if args.end is None else parse_bytes(args.end)
        if args.term is not None:
            if end is not None:
                raise InvalidArgument("--term cannot be combined with --to")
            start, end = term_range(parse_bytes(args.term))
        rows = r.index_query(
            args.field,
            start,
            end,
            return_terms=True,
            term_regex=args.regex,
            limit=args.limit,
        )
    stream_rows(out, ({"term": render_bytes(t), "key": render_bytes(k)} for t, k in rows), ["term", "key"])
    return None
