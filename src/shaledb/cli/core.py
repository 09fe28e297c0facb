"""Core CLI commands: manifests (the LSM shape) and single writes."""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import random
from collections.abc import Iterator
from typing import Any

from ..clock import SYSTEM_CLOCK
from ..db.writer import Db
from ..errors import NotFound, ObjectNotFound
from ..format import paths
from ..manifest.model import Manifest, SstInfo, Tree
from ..manifest.store import ManifestStore
from ..numbers import check_int, counted, human_size
from ..store.url import open_store
from .output import Output, command, parse_bytes
from .settings import cli_settings
from .stream import stream_rows


def manifest_store(url: str) -> ManifestStore:
    return ManifestStore(open_store(url), SYSTEM_CLOCK, random.Random(), author="cli")


def _when(ts: float | None) -> str | None:
    if ts is None:
        return None
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="seconds")


def _sst(s: SstInfo) -> dict[str, Any]:
    return {
        "id": s.id,
        "size": s.size,
        "entries": s.entries,
        "first_key": s.first_key.hex(),
        "last_key": s.last_key.hex(),
        "min_seq": s.min_seq,
        "max_seq": s.max_seq,
        "db": s.db,
    }


def _tree(t: Tree) -> dict[str, Any]:
    return {
        "l0": [_sst(s) for s in t.l0],
        "runs": [
            {"id": r.id, "size": r.size, "entries": r.entries, "ssts": [_sst(s) for s in r.ssts]}
            for r in t.runs
        ],
        "size": t.size,
    }


def describe_manifest(m: Manifest) -> dict[str, Any]:
    """A manifest as plain data (the CLI's JSON and the basis of its table)."""
    return {
        "id": m.id,
        "writer_epoch": m.writer_epoch,
        "compactor_epoch": m.compactor_epoch,
        "initialized": m.initialized,
        "destroyed_at": _when(m.destroyed_at_s),
        "next_wal_id": m.next_wal_id,
        "replay_after_wal_id": m.replay_after_wal_id,
        "last_l0_seq": m.last_l0_seq,
        "data": _tree(m.data),
        "index": _tree(m.index),
        "tracked_wals": [{"id": w.id, "size": w.size, "crc32c": w.crc32c} for w in m.tracked_wals],
        "checkpoints": [
            {
                "id": str(c.id),
                "manifest_id": c.manifest_id,
                "created": _when(c.create_time_s),
                "expires": _when(c.expire_time_s),
                "name": c.name,
                "writer_epoch": c.writer_epoch,
            }
            for c in m.checkpoints
        ],
        "parent": None
        if m.parent is None
        else {"url": m.parent.url, "checkpoint_id": str(m.parent.checkpoint_id)},
        "external_dbs": [{"url": e.url, "checkpoint_id": str(e.checkpoint_id)} for e in m.external_dbs],
        "journal_files": len(m.journal),
        "journal_bytes": sum(j.size for j in m.journal),
    }


def print_shape(out: Output, m: Manifest) -> None:
    out.line(
        f"manifest {m.id}  writer_epoch {m.writer_epoch}  compactor_epoch {m.compactor_epoch}  "
        f"wal replay after {m.replay_after_wal_id}, next {m.next_wal_id}  last_l0_seq {m.last_l0_seq}"
    )
    for name in ("data", "index"):
        t = m.tree(name)
        if name == "index" and not t.l0 and not t.runs:
            continue
        out.line(
            f"{name} tree: {counted(len(t.l0), 'L0 SST')}, {counted(len(t.runs), 'sorted run')}, "
            f"{human_size(t.size)}"
        )
        rows = [
            {"level": "L0", "id": s.id, "ssts": 1, "entries": s.entries, "size": human_size(s.size)}
            for s in t.l0
        ]
        rows += [
            {
                "level": f"run {r.id}",
                "id": "-",
                "ssts": len(r.ssts),
                "entries": r.entries,
                "size": human_size(r.size),
            }
            for r in t.runs
        ]
        out.table(rows, ["level", "id", "ssts", "entries", "size"])
    if m.checkpoints:
        out.line(f"checkpoints: {len(m.checkpoints)}")
    if m.tracked_wals:
        out.line(
            f"tracked WAL objects: {len(m.tracked_wals)} ({m.tracked_wals[0].id}..{m.tracked_wals[-1].id})"
        )


def _read_manifest_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--id", type=int, default=None, help="manifest id (default: the latest)")


@command("read-manifest", "show a manifest: the LSM shape, epochs, WAL range and checkpoints")(
    _read_manifest_args
)
def read_manifest(args: argparse.Namespace, out: Output) -> int | None:
    ms = manifest_store(args.path)
    if args.id is None:
        m = ms.read_latest()
    else:
        # "--id -1" said "InvalidPathError: id -1 is outside 0..2**64-1" (a path's check), and a
        # version the collector deleted only "object not found: manifest/0...0N.manifest".
        check_int("--id", args.id, minimum=1, maximum=2**64 - 1)
        try:
            m = ms.read(args.id)
        except ObjectNotFound:
            latest = ms.read_latest()
            if latest is None:
                raise NotFound(f"no database at {ms.store.describe()}") from None
            why = (
                ", and the garbage collector deletes older versions no checkpoint pins "
                "(list-manifests shows those present)"
                if args.id < latest.id
                else ""
            )
            raise NotFound(
                f"no manifest {args.id} at {ms.store.describe()}: the latest is {latest.id}{why}"
            ) from None
    if m is None:
        raise NotFound(f"no database at {ms.store.describe()}")
    if out.as_json:
        out.emit(describe_manifest(m))
    else:
        print_shape(out, m)
    return None


def _list_manifests_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--long", action="store_true", help="decode each manifest for its epochs and shape")


@command("list-manifests", "list the manifest versions present")(_list_manifests_args)
def list_manifests(args: argparse.Namespace, out: Output) -> int | None:
    ms = manifest_store(args.path)

    def rows() -> Iterator[dict[str, Any]]:
        for meta in ms.store.list(paths.MANIFEST_DIR):
            mid = paths.parse_manifest_id(meta.path)
            if mid is None:
                continue
            row: dict[str, Any] = {"id": mid, "size": meta.size, "modified": _when(meta.last_modified)}
            if args.long:
                m = ms.read(mid)
                row.update(
                    writer_epoch=m.writer_epoch,
                    compactor_epoch=m.compactor_epoch,
                    l0=len(m.data.l0),
                    runs=len(m.data.runs),
                    checkpoints=len(m.checkpoints),
                )
            yield row

    it = rows()
    first = next(it, None)
    if first is None:
        raise NotFound(f"no database at {ms.store.describe()}")
    cols = ["id", "size", "modified"] + (
        ["writer_epoch", "compactor_epoch", "l0", "runs", "checkpoints"] if args.long else []
    )
    stream_rows(out, itertools.chain([first], it), cols)  # a long history: printed as listed
    return None


def _put_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("key", help="key (UTF-8; 0x... for hex; text:... for literal text)")
    p.add_argument("value", help="value (UTF-8; 0x... for hex; text:... for literal text)")


@command("put", "write one key durably (opens the writer: fences any running writer)")(_put_args)
def put(args: argparse.Namespace, out: Output) -> int | None:
    with Db.open(args.path, settings=cli_settings(args, compactor=None, garbage_collector=None)) as db:
        h = db.put(parse_bytes(args.key), parse_bytes(args.value))
    out.emit({"key": args.key, "seq": h.seq})
    return None
