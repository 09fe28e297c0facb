"""Reader checkpoint maintenance: half-life refresh, re-establishing, outages longer than the lifetime."""

from __future__ import annotations

import random
import time
from dataclasses import replace

import pytest
from readers_kit import QUIET

from shaledb import Db, DbReader, DbReaderOptions, Unavailable, admin
from shaledb.manifest.store import ManifestStore
from shaledb.settings import RetryOptions
from shaledb.store import open_store
from shaledb.testing import FaultInjectingStore
from shaledb.testing.clock import ManualClock
from shaledb.testing.faults import OnFirstGet

LIFE = 100.0
POLL = 10.0
OPTS = DbReaderOptions(
    background_poll=False,
    manifest_poll_interval_s=POLL,
    checkpoint_lifetime_s=LIFE,
    retry=RetryOptions(max_attempts=2, initial_backoff_s=0.0, max_backoff_s=0.0),
)


def manifest_ids(url: str) -> list[int]:
    return sorted(int(m.path[9:29]) for m in open_store(url).list("manifest/"))


def expire_checkpoints(url: str, clock: ManualClock) -> int:
    """What the garbage collector's step 3 does: drop expired checkpoints."""
    ms = ManifestStore(open_store(url), clock, random.Random(0), author="gc")
    gone: list[int] = []

    def drop(m):  # type: ignore[no-untyped-def]
        keep = tuple(c for c in m.checkpoints if not c.expired(clock.now()))
        gone.append(len(m.checkpoints) - len(keep))
        return replace(m, checkpoints=keep) if len(keep) != len(m.checkpoints) else None

    ms.update(drop, timeout_s=5)
    return gone[-1]


def test_refresh_at_half_life_not_on_every_poll(mem_url: str, clock: ManualClock) -> None:
    with Db.open(mem_url, settings=QUIET, clock=clock) as db:
        db.put(b"a", b"1")
        with DbReader.open(mem_url, options=OPTS, clock=clock) as r:
            cp = r.checkpoint
            assert cp is not None and cp.expire_time_s == pytest.approx(clock.now() + LIFE)
            before = manifest_ids(mem_url)
            for _ in range(4):  # up to 40s: well before half-life
                clock.advance(POLL)
                r.refresh()
            assert manifest_ids(mem_url) == before  # polling wrote nothing (slatedb#1750)
            clock.advance(POLL + 1)  # past half-life
            r.refresh()
            after = manifest_ids(mem_url)
            assert len(after) == len(before) + 1
            cp2 = r.checkpoint
            assert cp2 is not None and cp2.id == cp.id
            assert cp2.expire_time_s == pytest.approx(clock.now() + LIFE)
            assert admin.read_manifest(mem_url).checkpoint(cp.id) == cp2
            assert r.stats()["refreshed"] == 1


@pytest.mark.parametrize("replay_s", [LIFE / 2 + 1, LIFE + 1])
def test_a_long_wal_replay_keeps_its_checkpoint_alive(
    mem_url: str, clock: ManualClock, replay_s: float
) -> None:
    """A reader far behind a busy writer replays for a long time in one poll: its checkpoint
    is maintained during the replay (extended once due, replaced if it expired anyway), not
    left to expire until the next poll (meanwhile the garbage collector would delete the
    view's SSTs and the WAL objects the reader has yet to replay)."""
    with Db.open(mem_url, settings=QUIET, clock=clock) as db:
        db.put(b"a", b"1")
        last = db.stats()["next_wal_id"] + 1
        spy = OnFirstGet(open_store(mem_url), f"wal/{last:020d}.sst", lambda: clock.advance(replay_s))
        with DbReader.open(store=spy, options=OPTS, clock=clock) as r:
            cp = r.checkpoint
            assert cp is not None and cp.expire_time_s == pytest.approx(clock.now() + LIFE)
            db.put(b"b", b"1")
            db.put(b"c", b"1")  # WAL object `last`: the replay reaches it `replay_s` later
            r.refresh()
            assert r.get(b"b") == b"1" and r.get(b"c") == b"1"
            cp2 = r.checkpoint
            assert cp2 is not None and cp2.expire_time_s == pytest.approx(clock.now() + LIFE)
            assert admin.read_manifest(mem_url).checkpoint(cp2.id) == cp2
            if replay_s < LIFE:
                assert cp2.id == cp.id and r.stats()["refreshed"] == 1
            else:
                assert cp2.id != cp.id and r.stats()["reestablished"] == 2


def test_recovers_after_an_outage_longer_than_the_lifetime(mem_url: str, clock: ManualClock) -> None:
    """slatedb#1888: the checkpoint expired during a brownout; the reader must not stay dead."""
    with Db.open(mem_url, settings=QUIET, clock=clock) as db:
        db.put(b"a", b"1")
        faults = FaultInjectingStore(open_store(mem_url), seed=7)
        r = DbReader.open(store=faults, options=OPTS, clock=clock)
        first = r.checkpoint
        assert first is not None
        db.put(b"wal-only", b"x")
        r.refresh()
        rule = faults.add_rule("fail_before")
        for _ in range(int(LIFE / POLL) + 5):  # a brownout longer than the lifetime
            clock.advance(POLL)
            with pytest.raises(Unavailable):
                r.refresh()
        assert r.get(b"wal-only") == b"x"  # memory still answers
        assert rule.fired > 0
        assert expire_checkpoints(mem_url, clock) >= 1  # the GC removed the expired checkpoint
        db.put(b"during", b"y")
        db.flush(memtable=True)
        faults.clear_rules()
        r.refresh()
        cp = r.checkpoint
        assert cp is not None and cp.id != first.id and not cp.expired(clock.now())
        assert admin.read_manifest(mem_url).checkpoint(cp.id) is not None
        assert r.get(b"during") == b"y" and r.get(b"a") == b"1" and r.get(b"wal-only") == b"x"
        r.close()


def test_expired_but_still_listed_checkpoint_is_replaced(mem_url: str, clock: ManualClock) -> None:
    with Db.open(mem_url, settings=QUIET, clock=clock) as db:
        db.put(b"a", b"1")
        with DbReader.open(mem_url, options=OPTS, clock=clock) as r:
            first = r.checkpoint
            assert first is not None
            clock.advance(LIFE + 1)  # missed every refresh (e.g. the process was suspended)
            r.refresh()
            cp = r.checkpoint
            assert cp is not None and cp.id != first.id
            m = admin.read_manifest(mem_url)
            assert m.checkpoint(first.id) is None and m.checkpoint(cp.id) is not None


def test_reestablishes_when_its_checkpoint_is_deleted(mem_url: str, clock: ManualClock) -> None:
    with Db.open(mem_url, settings=QUIET, clock=clock) as db:
        db.put(b"a", b"1")
        with DbReader.open(mem_url, options=OPTS, clock=clock) as r:
            first = r.checkpoint
            assert first is not None
            admin.delete_checkpoint(mem_url, first.id)
            r.refresh()
            cp = r.checkpoint
            assert cp is not None and cp.id != first.id and r.get(b"a") == b"1"


def test_no_expiry_lifetime_deletes_retired_checkpoints(mem_url: str) -> None:
    opts = replace(OPTS, checkpoint_lifetime_s=None)
    with Db.open(mem_url, settings=QUIET) as db:
        db.put(b"a", b"1")
        with DbReader.open(mem_url, options=opts) as r:
            first = r.checkpoint
            assert first is not None and first.expire_time_s is None
            db.flush(memtable=True)
            r.refresh()  # re-establish: the old one is retired
            r.refresh()  # nothing expires, so an idle retired checkpoint is deleted now
            ids = [c.id for c in admin.read_manifest(mem_url).checkpoints if dict(c.metadata).get("role")]
            assert first.id not in ids and len(ids) == 1


def test_background_polling_survives_an_outage(mem_url: str) -> None:
    """Real time, small intervals: the poll thread logs failures and carries on."""
    opts = DbReaderOptions(manifest_poll_interval_s=0.02, checkpoint_lifetime_s=0.5, retry=OPTS.retry)
    with Db.open(mem_url, settings=QUIET) as db:
        db.put(b"a", b"1")
        faults = FaultInjectingStore(open_store(mem_url), seed=3)
        with DbReader.open(store=faults, options=opts) as r:
            first = r.checkpoint
            assert first is not None
            faults.add_rule("fail_before")
            deadline = time.monotonic() + 30
            while r.last_error is None and time.monotonic() < deadline:
                time.sleep(0.01)
            assert isinstance(r.last_error, Unavailable)
            time.sleep(0.6)  # longer than the lifetime
            db.put(b"b", b"2")
            db.flush(memtable=True)
            faults.clear_rules()
            while r.get(b"b") != b"2" and time.monotonic() < deadline:
                time.sleep(0.01)
            assert r.get(b"b") == b"2"
            cp = r.checkpoint
            assert cp is not None and cp.id != first.id
            while r.last_error is not None and time.monotonic() < deadline:
                time.sleep(0.01)
            assert r.last_error is None
