"""Manifest changes are named edits (``shaledb.manifest.edits``), not anonymous callbacks."""

from __future__ import annotations

import ast
import uuid
from pathlib import Path

import pytest

from shaledb.errors import DatabaseDestroyed, FencedError, InvalidArgument
from shaledb.manifest.edits import (
    ClaimWriterEpoch,
    Decorated,
    DropCheckpoint,
    DropExpiredCheckpoints,
    MarkSoftDestroyed,
    NoChange,
    RemoveOption,
)
from shaledb.manifest.model import Checkpoint, Manifest
from shaledb.testing.clock import ManualClock

SRC = Path(__file__).resolve().parents[2] / "src" / "shaledb"


def _cp(n: int, expire: float | None = None, epoch: int | None = None) -> Checkpoint:
    return Checkpoint(
        uuid.UUID(int=n), manifest_id=1, create_time_s=0.0, expire_time_s=expire, writer_epoch=epoch
    )


def test_checkpoint_edits() -> None:
    m = Manifest(id=3, checkpoints=(_cp(1), _cp(2, expire=10.0), _cp(3, expire=99.0)))
    assert DropCheckpoint(uuid.UUID(int=9)).apply(m) is None
    dropped = DropCheckpoint(uuid.UUID(int=1)).apply(m)
    assert dropped is not None and [c.id.int for c in dropped.checkpoints] == [2, 3]
    expired = DropExpiredCheckpoints(now_s=50.0)
    out = expired.apply(m)
    assert out is not None and [c.id.int for c in out.checkpoints] == [1, 3]
    assert expired.gone == [str(uuid.UUID(int=2))]
    assert DropExpiredCheckpoints(now_s=5.0).apply(m) is None
    assert NoChange().apply(m) is None


def test_epoch_and_destroy_edits() -> None:
    m = Manifest(id=3, writer_epoch=4, checkpoints=(_cp(1), _cp(2, epoch=4)))
    claimed = ClaimWriterEpoch("here").apply(m)
    assert claimed is not None and claimed.writer_epoch == 5
    with pytest.raises(InvalidArgument):
        ClaimWriterEpoch("here").apply(Manifest(id=3, initialized=False))
    clock = ManualClock()
    with pytest.raises(FencedError):
        MarkSoftDestroyed(epoch=3, clock=clock).apply(m)
    gone = MarkSoftDestroyed(epoch=4, clock=clock).apply(m)
    assert gone is not None and gone.destroyed_at_s is not None
    assert [c.id.int for c in gone.checkpoints] == [1]
    with pytest.raises(DatabaseDestroyed):
        ClaimWriterEpoch("here").apply(gone)
    assert MarkSoftDestroyed(epoch=4, clock=clock).apply(gone) is None


def test_option_and_decorated_edits() -> None:
    m = Manifest(id=2, options=(("a", "1"), ("b", "2")))
    out = RemoveOption("a").apply(m)
    assert out is not None and out.options == (("b", "2"),)
    assert RemoveOption("zz").apply(m) is None
    seen: list[Manifest] = []
    dec = Decorated(RemoveOption("b"), lambda x: seen.append(x) or x)
    assert dec.apply(m) is not None and len(seen) == 1
    assert Decorated(RemoveOption("zz"), lambda x: seen.append(x) or x).apply(m) is None and len(seen) == 1


def _callback_updates(text: str) -> list[int]:
    """Lines where an ``update``/``update_manifest`` call passes a lambda or a local function."""
    tree = ast.parse(text)
    local_defs = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    bad = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if (
            node.func.attr not in ("update", "update_manifest", "_update_manifest", "_update")
            or not node.args
        ):
            continue
        arg = node.args[0]
        if isinstance(arg, ast.Lambda) or (isinstance(arg, ast.Name) and arg.id in local_defs):
            bad.append(node.lineno)
    return bad


def test_manifest_updates_pass_named_edits() -> None:
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        if lines := _callback_updates(path.read_text()):
            found[path.relative_to(SRC).as_posix()] = lines
    assert not found, (
        f"manifest updates with an anonymous callback (use a shaledb.manifest.edits.Edit): {found}"
    )


def test_the_scan_sees_callbacks() -> None:
    sample = """
def run(ms, db):
    def bump(m):
        return m
    ms.update(bump, timeout_s=1.0)
    db.update_manifest(lambda m: None)
    ms.update(DropCheckpoint(cid), timeout_s=1.0)
"""
    assert _callback_updates(sample) == [5, 6]
