"""store_options of the wrong type is InvalidArgument, not a bare ValueError/TypeError."""

from __future__ import annotations

from typing import Any

import pytest

from shaledb import Compactor, Db, DbReader, GarbageCollector, InvalidArgument


@pytest.mark.parametrize("bad", ["region=eu-west-1", [("region", "eu-west-1")], {1: "x"}])
def test_store_options_must_be_a_dict_of_names(bad: Any) -> None:
    url = "memory://store-options-type/db"
    with Db.open(url) as db:
        db.put(b"k", b"v")
    with pytest.raises(InvalidArgument, match="store_options must be a dict"):
        Db.open(url, store_options=bad)
    with pytest.raises(InvalidArgument, match="store_options must be a dict"):
        DbReader.open(url, store_options=bad)
    with pytest.raises(InvalidArgument, match="store_options must be a dict"):
        Compactor.open(url, store_options=bad)
    with pytest.raises(InvalidArgument, match="store_options must be a dict"):
        GarbageCollector.open(url, store_options=bad)
    with pytest.raises(InvalidArgument, match="store_options must be a dict"):
        Db.open_from_checkpoint("memory://store-options-type/clone", url, store_options=bad)
    with Db.open(url) as db:
        assert dict(db.scan()) == {b"k": b"v"}
