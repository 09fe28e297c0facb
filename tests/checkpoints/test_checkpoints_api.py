"""Checkpoints: create (current, from source, writer scopes), refresh, delete, list, and their errors."""

from __future__ import annotations

import random
import threading
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from checkpoints_kit import QUIET

from shaledb import (
    CheckpointNotFound,
    DatabaseDestroyed,
    Db,
    DbReader,
    FencedError,
    InvalidArgument,
    InvalidDbState,
    NotFound,
    admin,
)
from shaledb.bulk.read import plan_read
from shaledb.duration import format_duration, parse_duration, to_seconds
from shaledb.manifest.model import Manifest
from shaledb.manifest.store import ManifestStore
from shaledb.store import open_store
from shaledb.testing.clock import ManualClock


def _manifest_count(url: str) -> int:
    return len(list(open_store(url).list("manifest/")))


# ------------------------------------------------------------------ durations


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("7days 30min 10s", 7 * 86400 + 1800 + 10),
        ("1h30m", 5400),
        ("250ms", 0.25),
        ("2 hours", 7200),
        ("1year", 365 * 86400),
        ("90", 90),
        ("1.5h", 5400),
        ("1d, 2h", 93600),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text).total_seconds() == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "  ", "7 fortnights", "h", "10 5", "-5s", "1h -"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(InvalidArgument):
        parse_duration(text)


def test_to_seconds_and_format() -> None:
    assert to_seconds(timedelta(minutes=2)) == 120
    assert to_seconds(3) == 3.0
    assert to_seconds("1min") == 60
    assert to_seconds(None) is None
    for bad in (-1, float("nan"), True, object()):
        with pytest.raises(InvalidArgument):
            to_seconds(bad)  # type: ignore[arg-type]
    assert format_duration(93784) == "1d 2h 3min 4s"
    assert parse_duration(format_duration(93784)).total_seconds() == 93784


# -------------------------------------------------------------------- admin


def test_admin_create_list_refresh_delete(url: str) -> None:
    clock = ManualClock()
    with Db.open(url, settings=QUIET, clock=clock) as db:
        db.put(b"a", b"1")
    cp = admin.create_checkpoint(url, lifetime="1h", name="nightly", metadata={"job": "42"}, clock=clock)
    assert cp.expire_time_s == pytest.approx(clock.now() + 3600)
    assert cp.name == "nightly" and dict(cp.metadata) == {"job": "42"}
    m = admin.read_manifest(url)
    assert m.checkpoint(cp.id) == cp and cp.manifest_id == m.id  # pins the manifest that adds it
    # Names are labels, not keys.
    cp2 = admin.create_checkpoint(url, name="nightly", clock=clock)
    assert cp2.id != cp.id and cp2.expire_time_s is None
    assert {c.id for c in admin.list_checkpoints(url, name="nightly")} == {cp.id, cp2.id}
    clock.advance(1800)
    refreshed = admin.refresh_checkpoint(url, cp.id, lifetime=timedelta(hours=2), clock=clock)
    assert refreshed.expire_time_s == pytest.approx(clock.now() + 7200)
    assert refreshed.manifest_id == cp.manifest_id and refreshed.create_time_s == cp.create_time_s
    forever = admin.refresh_checkpoint(url, str(cp.id), clock=clock)
    assert forever.expire_time_s is None
    assert admin.delete_checkpoint(url, cp.id)
    assert {c.id for c in admin.list_checkpoints(url, name="nightly")} == {cp2.id}
    with pytest.raises(CheckpointNotFound):
        admin.delete_checkpoint(url, cp.id)
    assert admin.delete_checkpoint(url, cp.id, missing_ok=True) is False
    with pytest.raises(CheckpointNotFound):
        admin.refresh_checkpoint(url, uuid.uuid4(), lifetime=60)


def test_expired_checkpoints_cannot_be_refreshed_or_used(mem_url: str, clock: ManualClock) -> None:
    with Db.open(mem_url, settings=QUIET, clock=clock) as db:
        db.put(b"a", b"1")
    cp = admin.create_checkpoint(mem_url, lifetime=60, clock=clock)
    clock.advance(61)
    with pytest.raises(CheckpointNotFound, match="expired"):
        admin.refresh_checkpoint(mem_url, cp.id, lifetime=60, clock=clock)
    with pytest.raises(CheckpointNotFound, match="expired"):
        admin.create_checkpoint(mem_url, source=cp.id, clock=clock)
    with pytest.raises(CheckpointNotFound):
        DbReader.open(mem_url, cp.id, clock=clock)
    listed = admin.list_checkpoints(mem_url, clock=clock)
    assert [c.id for c in listed] == [cp.id] and listed[0].expired(clock.now())
    assert admin.list_checkpoints(mem_url, clock=clock, include_expired=False) == []
    assert admin.delete_checkpoint(mem_url, cp.id)  # expired ones can still be deleted


def test_create_from_source_reuses_its_version(mem_url: str) -> None:
    with Db.open(mem_url, settings=QUIET) as db:
        db.put(b"k", b"old")
        src = db.create_checkpoint(name="src")
        db.put(b"k", b"new")
        db.flush(memtable=True)
    derived = admin.create_checkpoint(mem_url, source=src.id, lifetime="10min", name="copy")
    assert derived.manifest_id == src.manifest_id and derived.id != src.id
    admin.delete_checkpoint(mem_url, src.id)  # the derived checkpoint lives on its own
    with DbReader.open(mem_url, derived.id) as r:
        assert r.get(b"k") == b"old"
    with pytest.raises(CheckpointNotFound):
        admin.create_checkpoint(mem_url, source=src.id)
    with pytest.raises(CheckpointNotFound, match="'not-a-uuid'"):  # not a UUID: a name, and none has it
        admin.create_checkpoint(mem_url, source="not-a-uuid")
    with pytest.raises(InvalidArgument):
        admin.create_checkpoint(mem_url, source=" ")


def test_every_api_taking_a_checkpoint_takes_its_name_as_the_cli_does(mem_url: str, tmp_path: Path) -> None:
    """DbReader.open(url, checkpoint="nightly") failed with "not a checkpoint id" while the CLI
    took the name: the API now resolves names the CLI's way (one live checkpoint so named)."""
    with Db.open(mem_url, settings=QUIET) as db:
        db.put(b"k", b"old")
        nightly = db.create_checkpoint(name="nightly")
        db.put(b"k", b"new")
    with DbReader.open(mem_url, checkpoint="nightly") as r:
        assert r.get(b"k") == b"old"
    assert admin.find_checkpoint(mem_url, "nightly") == nightly
    copy = admin.create_checkpoint(mem_url, source="nightly", name="copy")
    assert copy.manifest_id == nightly.manifest_id
    assert admin.refresh_checkpoint(mem_url, "copy", lifetime="1h").id == copy.id
    clone_url = (tmp_path / "clone").as_uri()
    with Db.open_from_checkpoint(clone_url, mem_url, "nightly", settings=QUIET) as clone:
        assert clone.get(b"k") == b"old"
    plan = plan_read(mem_url, checkpoint="nightly")
    assert plan.checkpoint_id == str(nightly.id)
    # Unknown: CheckpointNotFound naming the live names; ambiguous: InvalidArgument listing the ids.
    with pytest.raises(CheckpointNotFound, match="'copy', 'nightly'") as unknown:
        DbReader.open(mem_url, checkpoint="nighlty")
    assert "nighlty" in str(unknown.value)
    twin = admin.create_checkpoint(mem_url, source=nightly.id, name="nightly")
    for call in (
        lambda: DbReader.open(mem_url, checkpoint="nightly"),
        lambda: admin.delete_checkpoint(mem_url, "nightly"),
        lambda: admin.refresh_checkpoint(mem_url, "nightly"),
    ):
        with pytest.raises(InvalidArgument, match=f"{nightly.id}.*{twin.id}|{twin.id}.*{nightly.id}"):
            call()
    assert admin.delete_checkpoint(mem_url, "copy") is True
    assert admin.delete_checkpoint(mem_url, "copy", missing_ok=True) is False
    with pytest.raises(CheckpointNotFound):
        admin.delete_checkpoint(mem_url, "copy")


def test_errors_no_database_uninitialized_destroyed(mem_url: str) -> None:
    with pytest.raises(NotFound):
        admin.create_checkpoint(mem_url)
    with pytest.raises(NotFound):
        admin.list_checkpoints(mem_url)
    with Db.open(mem_url, settings=QUIET) as db:
        db.put(b"a", b"1")
        src = db.create_checkpoint()
    # An unfinished clone: initialized = false.
    other = mem_url + "-uninit"
    ms = ManifestStore(open_store(other), ManualClock(), random.Random(1), author="test")
    ms.create_initial(Manifest(id=1, initialized=False))
    with pytest.raises(InvalidDbState):
        admin.create_checkpoint(other)
    with pytest.raises(InvalidDbState):
        DbReader.open(other)
    admin.destroy(mem_url)
    with pytest.raises(DatabaseDestroyed):
        admin.create_checkpoint(mem_url)
    with pytest.raises(DatabaseDestroyed):
        admin.create_checkpoint(mem_url, source=src.id)
    with pytest.raises(DatabaseDestroyed):
        admin.refresh_checkpoint(mem_url, src.id, lifetime=10)
    with pytest.raises(InvalidArgument):
        admin.create_checkpoint(mem_url + "-x", lifetime=-5)
    with pytest.raises(InvalidArgument):
        admin.create_checkpoint(mem_url + "-x", lifetime=0)


def test_admin_checkpoint_includes_durable_wal(url: str) -> None:
    """Without a source, the checkpoint covers writes durable in the WAL but not yet in L0."""
    with Db.open(url, settings=QUIET) as db:
        for i in range(50):
            db.put(b"k%02d" % i, b"v%d" % i)  # durable, still only in WAL objects
        cp = admin.create_checkpoint(url)
        db.put(b"later", b"x")
        with DbReader.open(url, cp.id) as r:
            assert dict(r.scan()) == {b"k%02d" % i: b"v%d" % i for i in range(50)}
            assert r.get(b"later") is None


def test_concurrent_creators_all_succeed(mem_url: str) -> None:
    with Db.open(mem_url, settings=QUIET) as db:
        db.put(b"a", b"1")
    made: list[uuid.UUID] = []
    lock = threading.Lock()

    def work() -> None:
        for _ in range(5):
            cp = admin.create_checkpoint(mem_url, lifetime=600)
            with lock:
                made.append(cp.id)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    listed = {c.id for c in admin.list_checkpoints(mem_url)}
    assert len(made) == 20 and set(made) <= listed


# ------------------------------------------------------------------ writer


@pytest.mark.parametrize("scope", ["all", "durable"])
def test_writer_checkpoint_scopes(url: str, scope: str) -> None:
    with Db.open(url, settings=QUIET.replace(flush_interval_s=3600)) as db:
        db.put(b"durable", b"1")
        h = db.put(b"pending", b"2", durable=False)
        cp = db.create_checkpoint(lifetime=timedelta(minutes=5), name=scope, scope=scope)
        assert cp.expire_time_s is not None and cp.name == scope
        db.put(b"after", b"3")
        with DbReader.open(url, cp.id) as r:
            assert r.get(b"durable") == b"1"
            assert r.get(b"after") is None
            if scope == "all":
                assert h.durable and r.get(b"pending") == b"2"
            elif not h.durable:
                assert r.get(b"pending") is None


def test_checkpoint_isolates_from_later_writes_and_flushes(url: str) -> None:
    with Db.open(url, settings=QUIET) as db:
        for i in range(100):
            db.put(b"k%03d" % i, b"a")
        db.flush(memtable=True)
        for i in range(0, 100, 2):
            db.put(b"k%03d" % i, b"b")
        cp = db.create_checkpoint()
        for i in range(100):
            db.put(b"k%03d" % i, b"c")
        db.delete(b"k001")
        db.flush(memtable=True)
        expected = {b"k%03d" % i: (b"b" if i % 2 == 0 else b"a") for i in range(100)}
        with DbReader.open(url, cp.id) as r:
            assert dict(r.scan()) == expected
            assert r.get(b"k001") == b"a"
            assert [k for k, _ in r.scan(reverse=True, limit=3)] == [b"k099", b"k098", b"k097"]
        src2 = db.create_checkpoint(source=cp.id)
        assert src2.manifest_id == cp.manifest_id


def test_fenced_writer_cannot_create_checkpoint(mem_url: str) -> None:
    db1 = Db.open(mem_url, settings=QUIET)
    db1.put(b"a", b"1")
    # As another process would: one process may not open a second writer by URL (issue 28).
    db2 = Db.open(store=open_store(mem_url), settings=QUIET)
    try:
        with pytest.raises(FencedError):
            db1.create_checkpoint(scope="durable")
        cp = db2.create_checkpoint()
        assert admin.read_manifest(mem_url).checkpoint(cp.id) is not None
    finally:
        db2.close()
        try:
            db1.close()
        except FencedError:
            pass


def test_writer_checkpoint_argument_errors(mem_url: str) -> None:
    with Db.open(mem_url, settings=QUIET) as db:
        with pytest.raises(InvalidArgument):
            db.create_checkpoint(scope="everything")
        with pytest.raises(InvalidArgument):
            db.create_checkpoint(lifetime="soon")
        with pytest.raises(CheckpointNotFound):
            db.create_checkpoint(source=uuid.uuid4())
        with pytest.raises(InvalidArgument):
            db.create_checkpoint(name="x" * 1000)


def test_closed_writer_cannot_create_checkpoint(mem_url: str) -> None:
    from shaledb import ClosedError

    db = Db.open(mem_url, settings=QUIET)
    db.close()
    for scope in ("all", "durable"):
        with pytest.raises(ClosedError):
            db.create_checkpoint(scope=scope)
