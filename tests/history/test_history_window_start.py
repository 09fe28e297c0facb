"""Times at the start of the history window resolve after a reopen.

The marks persisted in the manifest are thinned to the last one of each second; the
first mark (where history began) was thinned away with the rest of its second, so after
a reopen a time inside the window but before that second's last write raised
HistoryUnavailable, naming seq 0 as "the oldest readable point".
"""

from __future__ import annotations

from datetime import UTC, datetime

from shaledb import Db, DbReader, DbReaderOptions, Settings
from shaledb.testing.clock import ManualClock


def test_a_time_in_the_first_second_resolves_after_a_reopen(mem_url: str) -> None:
    clock = ManualClock(start=1_000_000.0)
    settings = Settings(history_retention_s=3600)
    with Db.open(mem_url, settings=settings, clock=clock) as db:
        clock.advance(0.2)
        db.put(b"k", b"1")
        at = datetime.fromtimestamp(clock.now() + 0.1, tz=UTC)  # between the two writes
        clock.advance(0.5)
        db.put(b"k", b"2")
        clock.advance(0.1)
        with db.snapshot(at_time=at) as snap:
            assert snap.get(b"k") == b"1"  # the writer's own marks: exact
    clock.advance(1)
    with Db.open(mem_url, clock=clock) as db, db.snapshot(at_time=at) as snap:
        # the persisted marks: a state at most one second older than asked
        assert snap.get(b"k") in (None, b"1")
    reader = DbReader.open(mem_url, clock=clock, options=DbReaderOptions(background_poll=False))
    try:
        with reader.snapshot(at_time=at) as rsnap:
            assert rsnap.get(b"k") in (None, b"1")
    finally:
        reader.close()
