"""``Settings.pin_metadata_on_open``: opening fetches every SST's index and filter, or none.

A writer that only writes (a bulk ingest's claim, which opens the database to fence it and
closes again) used to pay one ranged GET per SST of the database at every open.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from shaledb import Db, Settings
from shaledb.bulk.ingest import begin_ingest, ingest_columns
from shaledb.errors import InvalidArgument
from shaledb.store import open_store
from shaledb.testing import FaultInjectingStore

QUIET = Settings(compactor=None, garbage_collector=None)
SSTS = 6


def _database(tmp_path: Path) -> tuple[FaultInjectingStore, dict[bytes, bytes]]:
    store = FaultInjectingStore(open_store(f"file://{tmp_path}/db"), seed=0)
    model: dict[bytes, bytes] = {}
    with Db.open(store=store, settings=QUIET) as db:
        for s in range(SSTS):
            batch = {f"k{s}-{i:03d}".encode(): f"v{s}.{i}".encode() for i in range(30)}
            for k, v in batch.items():
                db.put(k, v)
            db.flush(memtable=True)
            model.update(batch)
        assert len(db.manifest.data.l0) == SSTS
    return store, model


def test_an_open_without_pinning_reads_no_sst_and_reads_still_find_everything(tmp_path: Path) -> None:
    store, model = _database(tmp_path)
    store.clear_calls()
    with Db.open(store=store, settings=QUIET.replace(pin_metadata_on_open=False)) as db:
        assert store.count_calls(("get", "get_range", "get_ranges"), "compacted/") == 0
        assert db.get(b"k3-007") == model[b"k3-007"]
        assert dict(db.scan()) == model
    store.clear_calls()
    with Db.open(store=store, settings=QUIET):
        assert (
            store.count_calls(("get", "get_range", "get_ranges"), "compacted/") >= SSTS
        )  # the default pins each SST's index and filter


def test_an_ingest_claim_reads_no_sst(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/db"
    store = FaultInjectingStore(open_store(url), seed=0)
    for b in range(4):
        ingest_columns(url, [f"b{b}".encode()], [b"v"], ingest_id=f"i{b}", store=store)
    store.clear_calls()
    begin_ingest(url, store=store, ingest_id="next")
    assert store.count_calls(("get", "get_range", "get_ranges"), "compacted/") == 0


def test_the_setting_is_a_boolean() -> None:
    with pytest.raises(InvalidArgument, match="pin_metadata_on_open"):
        Settings(pin_metadata_on_open=1)  # type: ignore[arg-type]
