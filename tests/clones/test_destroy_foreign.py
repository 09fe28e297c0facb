"""A database's root may hold files that are not its own: creating warns, destroying keeps them.

Destroy deleted every object under the root, so a database created in a folder or a bucket
that held a user's other files took them with it (hard destroy, and the collector after a
soft one). It now deletes only in the database's own folders (``paths.OWN_DIRS``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from shaledb import Db, GarbageCollector, GcOptions, Settings, admin
from shaledb.store import open_store

QUIET = Settings(compactor=None, garbage_collector=None)
FOREIGN = {"notes.txt": b"hi", "src/main.py": b"code", "manifest.txt": b"not ours", "walrus/x": b"x"}


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _fill(db: Db) -> None:
    for i in range(40):
        db.put(b"k%03d" % i, b"v" * 50)
    db.flush(memtable=True)


@pytest.mark.parametrize("how", ["hard", "soft+gc"])
def test_destroy_deletes_only_the_database_s_own_objects(tmp_path: Path, how: str, caplog: Any) -> None:
    root = tmp_path / "shared"
    for name, data in FOREIGN.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    (root / "mine").mkdir()  # a user's empty folder: not the database's to remove
    with caplog.at_level(logging.WARNING, logger="shaledb"), Db.open(str(root), settings=QUIET) as db:
        _fill(db)
    warned = [r.getMessage() for r in caplog.records if "already holds 4 other object" in r.getMessage()]
    assert len(warned) == 1 and "'manifest.txt'" in warned[0], caplog.text
    with Db.open(str(root), settings=QUIET) as db:  # reopening says nothing more
        assert db.get(b"k001") == b"v" * 50
    assert len([r for r in caplog.records if "already holds" in r.getMessage()]) == 1
    if how == "hard":
        admin.destroy(str(root), soft=False)
    else:
        admin.destroy(str(root))
        gc = GarbageCollector.open(str(root), GcOptions(db_delete_grace_s=0, min_age_s=0))
        try:
            gc.run_once()
        finally:
            gc.close()
    assert _files(root) == FOREIGN  # the old code deleted every one of them
    # The database's folders went with their objects (they stayed, empty); the user's stay.
    assert sorted(p.name for p in root.iterdir()) == ["manifest.txt", "mine", "notes.txt", "src", "walrus"]


def test_a_hard_destroy_on_s3_keeps_the_prefix_s_other_objects(s3_url_factory: Any) -> None:
    loc = s3_url_factory()
    store = open_store(loc.url, **loc.options)
    store.put("README", b"read me")
    store.put("reports/2025.csv", b"a,b\n")
    with Db.open(loc.url, settings=QUIET, store_options=loc.options) as db:
        _fill(db)
    admin.destroy(loc.url, soft=False, store_options=loc.options)
    assert sorted(m.path for m in store.list("")) == ["README", "reports/2025.csv"]
