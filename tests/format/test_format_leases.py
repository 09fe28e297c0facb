"""docs/format/leases.md against the code: the documented fields are the ones written, the
example reads back, and unreadable bytes read as no lease (which is what makes a lease safe
to leave without a checksum: it then protects nothing and holds no role)."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

from shaledb.bulk.ingest.model import LEASE_EPOCH, put_lease
from shaledb.compaction.compactor import read_lease
from shaledb.compaction.role import RoleLease, parse_holder
from shaledb.format import paths
from shaledb.store import open_store
from shaledb.testing.clock import ManualClock

DOC = (Path(__file__).resolve().parents[2] / "docs" / "format" / "leases.md").read_text()


def documented_fields(section: str) -> set[str]:
    """The first column of the field table under the heading that starts with ``section``."""
    part = DOC.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(\w+)` \|", part, re.M))


def test_a_job_lease_holds_the_documented_fields_and_the_example_reads_back() -> None:
    store = open_store("memory://leases-doc-job")
    lid = paths.new_ulid(1_764_446_400.0, random.Random(1))
    put_lease(store, lid, "ingest flights", 3600.0, 1_764_446_400.5)
    body = json.loads(store.get(paths.job_path(lid)))
    assert set(body) == documented_fields("Job leases") - {"stream"}
    put_lease(store, lid, "stream s-1: a micro-batch's staged run", 3600.0, 1_764_446_400.5, stream="s-1")
    streamed = json.loads(store.get(paths.job_path(lid)))
    assert set(streamed) == documented_fields("Job leases") and streamed["stream"] == "s-1"
    assert read_lease(store.get(paths.job_path(lid))) == (LEASE_EPOCH, 3600.0)
    example = re.search(r"^Example .*?: `(\{.*?\})`$", DOC, re.M)
    assert example is not None
    assert json.loads(example.group(1)) == body
    assert read_lease(example.group(1).encode()) == (LEASE_EPOCH, 3600.0)


def test_a_role_lease_holds_the_documented_fields() -> None:
    store = open_store("memory://leases-doc-role")
    RoleLease(store, ManualClock(1_764_446_400.0), 7, 30.0, "00ff")
    data = store.get(paths.role_lease_path(7))
    assert paths.role_lease_path(7) == "compactions/00000000000000000007.role"
    assert set(json.loads(data)) == documented_fields("Compactor role leases")
    h = parse_holder(data)
    assert h is not None and h.epoch == 7 and h.lease_s == 30.0 and not h.serving


def test_unreadable_leases_read_as_none() -> None:
    for bad in (b"", b"\xff\x00", b"[]", b'{"epoch": 1}', b'{"epoch": 1, "lease_s": Infinity}'):
        assert read_lease(bad) is None, bad
        assert parse_holder(bad) is None, bad
