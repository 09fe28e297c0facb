"""The change feed's options and cursors: bad values are refused at the call with
``InvalidArgument`` naming the option; a cursor past the end of the WAL raises
``CursorAhead`` instead of waiting forever; ``read(limit=0)`` reads nothing."""

from __future__ import annotations

import math
import threading

import pytest

from shaledb import CursorAhead, Db, Settings
from shaledb.errors import InvalidArgument

QUIET = Settings(compactor=None, garbage_collector=None)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"poll_interval_s": math.nan}, "poll_interval_s"),
        ({"poll_interval_s": math.inf}, "poll_interval_s"),
        ({"poll_interval_s": 0}, "poll_interval_s"),
        ({"poll_interval_s": -1.0}, "poll_interval_s"),
        ({"poll_interval_s": "1"}, "poll_interval_s"),
        ({"follow": "no"}, "follow must be True or False"),
        ({"follow": 0}, "follow must be True or False"),
        ({"read_ahead": 0}, "read_ahead"),
        ({"read_ahead": 2.5}, "read_ahead"),
    ],
)
def test_bad_options_are_refused(mem_url: str, options: dict[str, object], match: str) -> None:
    with Db.open(mem_url, settings=QUIET) as db, pytest.raises(InvalidArgument, match=match):
        db.changes(since=None, **options)  # type: ignore[arg-type]


def test_read_limits(mem_url: str) -> None:
    with Db.open(mem_url, settings=QUIET) as db:
        for i in range(4):
            db.put(b"k%d" % i, b"v")
        feed = db.changes(since=None, follow=False)
        assert feed.read(limit=0) == []  # before: one change came back and the cursor moved
        assert [c.key for c in feed.read(limit=1)] == [b"k0"]
        for bad in (-1, 1.5, True, "2"):
            with pytest.raises(InvalidArgument, match="limit"):
                feed.read(limit=bad)  # type: ignore[arg-type]
        assert [c.key for c in feed.read()] == [b"k1", b"k2", b"k3"]
        assert "no follow" in repr(feed) and "c1." in repr(feed)
        feed.close()
        assert repr(feed).endswith(", closed)")


def test_a_cursor_past_the_end_is_refused_not_waited_on(mem_url: str) -> None:
    with Db.open(mem_url, settings=QUIET) as db:
        db.put(b"k", b"v")
        last = db.changes(since=None, follow=False).read()[-1].cursor
        with pytest.raises(CursorAhead, match="past the end"):
            db.changes(since="c1.999.50.0", follow=False).read()
        following = db.changes(since="c1.999.50.0", poll_interval_s=0.01)
        out: list[BaseException] = []

        def consume() -> None:
            try:
                for _ in following:
                    pass
            except BaseException as exc:
                out.append(exc)

        t = threading.Thread(target=consume)
        t.start()
        t.join(5)
        alive = t.is_alive()
        following.close()
        assert not alive, "a following feed with a cursor past the end waited forever"
        assert out and isinstance(out[0], CursorAhead)
        # the real end of the history is fine, following or not
        assert db.changes(since=last, follow=False).read() == []
        db.put(b"k2", b"v")
        assert [c.key for c in db.changes(since=last, follow=False).read()] == [b"k2"]
        assert db.changes(since="latest", follow=False).read() == []


def test_a_cursor_whose_sequence_number_is_ahead_is_refused(mem_url: str) -> None:
    """A real WAL object but a sequence number no write has: before, a follower skipped every
    new write until the numbers caught up with the cursor (silently losing them)."""
    with Db.open(mem_url, settings=QUIET) as db:
        for i in range(3):
            db.put(b"k%d" % i, b"v")
        first = db.changes(since=None, follow=False).read()[0].cursor
        bogus = f"c1.{first.wal_id}.999999.0"
        with pytest.raises(CursorAhead, match="holds writes up to seq"):
            db.changes(since=bogus, follow=False).read()
        # every real cursor of the history still reads on, to the end
        for c in db.changes(since=None, follow=False).read():
            rest = db.changes(since=c.cursor, follow=False).read()
            assert all(r.seq > c.seq or (r.seq == c.seq and r.batch_index >= c.batch_index + 1) for r in rest)
