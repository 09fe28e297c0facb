"""Item 3 of issue 28: a documented logger tree at INFO, and malloc left alone by default."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

import shaledb.db.writer
from shaledb import Compactor, CompactorOptions, Db, GarbageCollector, GcOptions, Settings

QUIET = Settings(compactor=None, garbage_collector=None, flush_interval_s=0.005)


def test_the_root_logger_has_a_null_handler() -> None:
    assert any(isinstance(h, logging.NullHandler) for h in logging.getLogger("shaledb").handlers)


def test_open_flush_fencing_compaction_and_gc_log_at_info(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = str(tmp_path / "db")
    caplog.set_level(logging.INFO, logger="shaledb")
    for _ in range(4):
        with Db.open(url, settings=QUIET) as db:
            db[b"k"] = b"v"
            db.flush(memtable=True)
    Compactor.open(url, CompactorOptions(min_l0_ssts=2)).run_once()
    GarbageCollector.open(url, GcOptions(min_age_s=0.0)).run_once()
    by_logger: dict[str, list[str]] = {}
    for r in caplog.records:
        if r.levelno == logging.INFO:
            by_logger.setdefault(r.name, []).append(r.getMessage())
    opens = by_logger["shaledb.db"]
    assert "as writer epoch 1 at manifest" in opens[0] and "replayed 0 WAL objects" in opens[0]
    assert "(after writer epoch 3)" in opens[3] and "fenced" not in opens[3]  # it closed cleanly
    assert any(m.startswith("flushed a memtable to L0") for m in by_logger["shaledb.flush"])
    assert any(m.startswith("compacted") for m in by_logger["shaledb.compaction"])
    assert any("deleted" in m and "SSTs" in m for m in by_logger["shaledb.gc"])


def test_a_writer_leaves_the_process_allocator_alone_unless_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    monkeypatch.setattr(shaledb.db.writer, "fix_mmap_threshold", calls.append)
    assert Settings().malloc_mmap_threshold_bytes is None
    with Db.open(tmp_path / "a", settings=QUIET):
        pass
    assert calls == []
    with Db.open(tmp_path / "b", settings=QUIET.replace(malloc_mmap_threshold_bytes=128 * 1024)):
        pass
    assert calls == [128 * 1024]


def test_every_logger_the_package_uses_is_in_the_documented_tree() -> None:
    """docs/logging.md's table is where an operator looks up what to turn on: a logger the code
    creates but the table does not name (itself or as a parent's listed child) is invisible."""
    root = Path(__file__).resolve().parents[2]
    src = root / "src"
    names: set[str] = set()
    for path in (src / "shaledb").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        names.update(re.findall(r'getLogger\("(shaledb[\w.]*)"\)', text))
        if "getLogger(__name__)" in text:
            names.add(".".join(path.relative_to(src).with_suffix("").parts))
    table = (root / "docs" / "logging.md").read_text(encoding="utf-8").split("## The logger tree")[1]
    documented: set[str] = set()
    for row in table.split("\n\n")[1].splitlines()[2:]:
        first = row.split("|")[1]
        for parent in re.findall(r"`(shaledb[\w.]*)`", first):
            documented.add(parent)
            documented.update(f"{parent}{child}" for child in re.findall(r"`(\.\w+)`", first))
    names.discard("shaledb")  # the root, above the table
    assert names - documented == set(), "loggers missing from docs/logging.md's table"
