"""A scan belongs to the handle it came from: closing the handle (a snapshot, its
database, a ``Db`` or a ``DbReader``) mid-scan makes the scan's next step raise
``ClosedError``; it never goes on silently short or reads released versions."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from shaledb import Db, DbReader, Settings
from shaledb.errors import ClosedError

QUIET = Settings(compactor=None, garbage_collector=None)
N = 3000  # several chunks: a scan hands out a block's worth of rows at a time


def _fill(db: Db) -> None:
    with db.batch() as b:
        for i in range(N):
            b.put(b"k%05d" % i, b"v%d" % i)
    db.flush(memtable=True)
    with db.batch() as b:  # a memtable over the SST: the snapshot's view pins both
        for i in range(0, N, 3):
            b.put(b"k%05d" % i, b"w%d" % i)


def _drain_after(it: Iterator[tuple[bytes, bytes]], close: Callable[[], None]) -> int:
    got = 0
    for _ in it:
        got += 1
        if got == 10:
            close()
    return got


SCANS: dict[str, Callable[[object], Iterator[object]]] = {
    "scan": lambda h: iter(h.scan()),  # type: ignore[attr-defined]
    "reverse": lambda h: iter(h.scan(reverse=True)),  # type: ignore[attr-defined]
    "items": lambda h: h.items(),  # type: ignore[attr-defined]
    "fold_keys": lambda h: iter(h.fold_keys()),  # type: ignore[attr-defined]
    "scan_heads": lambda h: iter(h.scan_heads()),  # type: ignore[attr-defined]
}


@pytest.mark.parametrize("kind", sorted(SCANS))
def test_closing_a_snapshot_mid_scan_stops_the_scan(mem_url: str, kind: str) -> None:
    with Db.open(mem_url, settings=QUIET) as db:
        _fill(db)
        snap = db.snapshot()
        with db.batch() as b:  # overwrites after the snapshot: its pin keeps the old versions
            for i in range(N):
                b.put(b"k%05d" % i, b"x")
        it = SCANS[kind](snap)
        with pytest.raises(ClosedError, match="snapshot is closed"):
            _drain_after(it, snap.close)  # type: ignore[arg-type]
        with pytest.raises(ClosedError):
            snap.get(b"k00001")
        assert len(list(db.scan())) == N


def test_a_scan_that_ends_before_the_close_keeps_every_row(mem_url: str) -> None:
    with Db.open(mem_url, settings=QUIET) as db:
        _fill(db)
        with db.snapshot() as snap:
            rows = list(snap.scan())
        assert len(rows) == N and rows[0] == (b"k00000", b"w0") and rows[1] == (b"k00001", b"v1")


@pytest.mark.parametrize("kind", sorted(SCANS))
def test_closing_the_db_mid_scan_stops_its_scans_and_its_snapshots_scans(mem_url: str, kind: str) -> None:
    db = Db.open(mem_url, settings=QUIET)
    _fill(db)
    it = SCANS[kind](db)
    snap_it = SCANS[kind](db.snapshot())
    next(snap_it)
    with pytest.raises(ClosedError, match="database is closed"):
        _drain_after(it, db.close)  # type: ignore[arg-type]
    with pytest.raises(ClosedError, match="database is closed"):
        for _ in snap_it:
            pass


def test_closing_a_reader_mid_scan_stops_the_scan(mem_url: str) -> None:
    with Db.open(mem_url, settings=QUIET) as db:
        _fill(db)
        db.flush(memtable=True)
        reader = DbReader.open(mem_url)
        it = iter(reader.scan())
        with pytest.raises(ClosedError):
            _drain_after(it, reader.close)  # type: ignore[arg-type]


def test_snapshot_reprs_say_where_and_when(mem_url: str) -> None:
    with Db.open(mem_url, settings=QUIET) as db:
        db.put(b"k", b"v")
        snap = db.snapshot()
        assert repr(snap) == f"Snapshot(seq={snap.seq} of {db!r})"
        snap.close()
        assert repr(snap).endswith(", closed)")
        db.flush(memtable=True)
        with DbReader.open(mem_url) as reader, reader.snapshot() as rs:
            assert repr(rs).startswith(f"ReaderSnapshot(seq={rs.seq} of DbReader(")


def test_scan_repr_says_whether_it_still_holds_its_view(mem_url: str) -> None:
    with Db.open(mem_url, settings=QUIET) as db:
        db.put(b"k", b"v")
        scan = db.scan()
        assert repr(scan) == "Scan(open)"
        assert list(scan) == [(b"k", b"v")]
        assert repr(scan) == "Scan(done: its view released)"


POINT_READS: dict[str, Callable[[object], object]] = {
    "get": lambda s: s.get(b"k00001"),  # type: ignore[attr-defined]
    "getitem": lambda s: s[b"k00001"],  # type: ignore[index]
    "contains": lambda s: b"k00001" in s,  # type: ignore[operator]
    "head": lambda s: s.head(b"k00001"),  # type: ignore[attr-defined]
    "get_many": lambda s: s.get_many([b"k00001", b"k00002"]),  # type: ignore[attr-defined]
    "index_query": lambda s: s.index_query("f"),  # type: ignore[attr-defined]
    "scan": lambda s: list(s.scan()),  # type: ignore[attr-defined]
    "keys": lambda s: list(s.keys()),  # type: ignore[attr-defined]
}


@pytest.mark.parametrize("read", sorted(POINT_READS))
def test_a_closed_dbs_snapshots_refuse_every_read(mem_url: str, read: str) -> None:
    # A snapshot's point reads went on after its database closed (from a cleared cache and
    # a closed store) while its scans raised ClosedError: now every read raises.
    db = Db.open(mem_url, settings=QUIET)
    _fill(db)
    snap = db.snapshot()
    assert snap.get(b"k00001") == b"v1"
    db.close()
    with pytest.raises(ClosedError, match="database is closed: its snapshots are closed with it"):
        POINT_READS[read](snap)
    assert repr(snap).endswith(", closed)")
    snap.close()  # closing it too is harmless
    with pytest.raises(ClosedError, match="snapshot is closed"):
        POINT_READS[read](snap)


@pytest.mark.parametrize("read", sorted(POINT_READS))
def test_a_closed_readers_snapshots_refuse_every_read(mem_url: str, read: str) -> None:
    with Db.open(mem_url, settings=QUIET) as db:
        _fill(db)
        db.flush(memtable=True)
        reader = DbReader.open(mem_url)
        snap = reader.snapshot()
        assert snap.get(b"k00001") == b"v1"
        reader.close()
        with pytest.raises(ClosedError, match="reader is closed: its snapshots are closed with it"):
            POINT_READS[read](snap)
        snap.close()


def test_a_closed_aio_handles_snapshots_refuse_every_read(mem_url: str) -> None:
    import asyncio

    from shaledb import aio

    async def main() -> None:
        db = await aio.Db.open(mem_url, settings=QUIET)
        await db.put(b"k", b"v")
        async with db.snapshot() as snap:
            assert await snap.get(b"k") == b"v"
            # The sync handle closed under the aio one: the aio snapshot's reads say so.
            db.sync.close()
            with pytest.raises(ClosedError, match="database is closed"):
                await snap.get(b"k")
            with pytest.raises(ClosedError, match="database is closed"):
                await snap.get_many([b"k"])
            with pytest.raises(ClosedError, match="database is closed"):
                [row async for row in snap.scan()]
            await db.close()
            with pytest.raises(ClosedError):
                await snap.get(b"k")
            with pytest.raises(ClosedError):
                [row async for row in snap.scan()]

    asyncio.run(main())
