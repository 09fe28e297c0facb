"""Helpers of the Spark tests (importable by test modules, unlike conftest)."""

from __future__ import annotations

import random
from typing import Any

from shaledb import DbReader, DbReaderOptions
from shaledb.clock import SYSTEM_CLOCK
from shaledb.manifest.model import Manifest
from shaledb.manifest.store import ManifestStore
from shaledb.store import open_store


def latest(url: str) -> Manifest:
    m = ManifestStore(open_store(url), SYSTEM_CLOCK, random.Random(), author="test").read_latest()
    assert m is not None
    return m


def exists(url: str) -> bool:
    """Whether a database is at ``url`` (a failed first write leaves none)."""
    return (
        ManifestStore(open_store(url), SYSTEM_CLOCK, random.Random(), author="test").read_latest() is not None
    )


def contents(url: str) -> dict[bytes, bytes]:
    opts = DbReaderOptions(establish_checkpoint=False, background_poll=False)
    with DbReader.open(url, options=opts) as r:
        return dict(r.scan())


def kv_frame(spark: Any, rows: list[tuple[bytes, bytes]], partitions: int = 3) -> Any:
    """A DataFrame of binary key/value rows, in random order over ``partitions`` partitions."""
    return spark.createDataFrame(rows, "key binary, value binary").repartition(partitions)


def referenced(url: str) -> set[str]:
    return {s.id for s in latest(url).all_ssts()}


def sst_ids(url: str) -> set[str]:
    return {m.path.split("/", 1)[1][:-4] for m in open_store(url).list("compacted/")}
