"""The consistency checker (shaledb.testing.linearizability) on hand-made histories whose
verdicts are known, good and bad, before its verdict on real runs is trusted."""

from __future__ import annotations

import random

import pytest

from shaledb.testing.ledger import state_digest
from shaledb.testing.linearizability import (
    Op,
    PrefixViolation,
    check,
    check_linearizable,
    check_sequential,
    digests_of_prefixes,
    prefix_positions,
)


def w(p: str, call: float, ret: float | None, *ops: tuple[bytes, bytes | None], **kw: object) -> Op:
    return Op(p, call, ret, writes=tuple(ops), **kw)  # type: ignore[arg-type]


def r(p: str, call: float, ret: float, seen: dict[bytes, bytes | None], *, all: bool = False) -> Op:
    return Op(p, call, ret, read=seen, read_all=all)


A, B, X = b"a", b"b", b"x"


def test_a_read_after_its_write_is_linearizable() -> None:
    h = [w("w", 0, 1, (X, b"1")), r("r", 2, 3, {X: b"1"})]
    assert check_linearizable(h)
    assert check_sequential(h)


def test_a_read_overlapping_a_write_may_see_either_value() -> None:
    for seen in (b"1", None):
        assert check_linearizable([w("w", 0, 4, (X, b"1")), r("r", 1, 2, {X: seen})])


def test_a_stale_read_is_not_linearizable_but_sequentially_consistent() -> None:
    h = [w("w", 0, 1, (X, b"1")), r("r", 2, 3, {X: None})]
    v = check_linearizable(h)
    assert not v
    assert "saw" in v.reason or "stuck" in v.reason
    assert check_sequential(h)
    # the reader weak, the writer strong: what shaledb promises a reader in another process
    assert check(h, strong={"w"})


def test_a_reader_that_goes_back_is_not_even_sequentially_consistent() -> None:
    h = [
        w("w", 0, 1, (X, b"1")),
        w("w", 2, 3, (X, b"2")),
        r("r", 4, 5, {X: b"2"}),
        r("r", 6, 7, {X: b"1"}),
    ]
    assert not check_sequential(h)
    assert not check_linearizable(h)


def test_a_torn_batch_is_caught() -> None:
    h = [w("w", 0, 1, (A, b"1"), (B, b"1")), r("r", 0.5, 2, {A: b"1", B: None})]
    assert not check_sequential(h)
    assert check_sequential([w("w", 0, 1, (A, b"1"), (B, b"1")), r("r", 0.5, 2, {A: b"1", B: b"1"})])


def test_a_value_never_written_is_caught() -> None:
    assert not check_sequential([w("w", 0, 1, (X, b"1")), r("r", 2, 3, {X: b"9"})])


def test_a_lost_acknowledged_write_is_caught_by_a_later_strong_read() -> None:
    h = [w("w", 0, 1, (X, b"1")), w("w", 1, 2, (X, None)), r("final", 5, 6, {}, all=True)]
    assert check_linearizable(h)
    lost = [w("w", 0, 1, (X, b"1")), r("final", 5, 6, {}, all=True)]
    assert not check_linearizable(lost)


def test_a_write_of_unknown_outcome_may_or_may_not_take_effect() -> None:
    for final in ({X: b"2"}, {X: b"1"}):
        h = [w("w", 0, 1, (X, b"1")), w("w", 2, None, (X, b"2")), r("final", 5, 6, final, all=True)]
        assert check_linearizable(h)


def test_an_unknown_write_seen_then_unseen_is_caught() -> None:
    h = [
        w("w", 0, 1, (X, b"1")),
        w("w", 2, None, (X, b"2")),
        r("r", 3, 4, {X: b"2"}),
        r("r", 5, 6, {X: b"1"}),
    ]
    assert not check_sequential(h)


def test_a_failed_write_must_not_be_visible() -> None:
    # A fenced writer's write raised FencedError: it must never show.
    h = [
        w("old", 0, 1, (X, b"1")),
        w("new", 2, 3, (X, b"2")),
        w("old", 4, 5, (X, b"3"), ok=False),
        r("r", 6, 7, {X: b"3"}),
    ]
    assert not check_sequential(h)
    h[-1] = r("r", 6, 7, {X: b"2"})
    assert check_linearizable(h)


def test_fencing_deadline_stops_a_zombie_write_from_landing_later() -> None:
    # The old writer's write is of unknown outcome; the new writer opened at t=3.
    zombie = w("old", 1, None, (X, b"z"), deadline=3.0)
    good = [
        w("old", 0, 0.5, (X, b"1")),
        zombie,
        w("new", 4, 5, (X, b"2")),
        r("final", 6, 7, {X: b"2"}, all=True),
    ]
    assert check_linearizable(good)
    bad = [
        w("old", 0, 0.5, (X, b"1")),
        zombie,
        w("new", 4, 5, (X, b"2")),
        r("final", 6, 7, {X: b"z"}, all=True),
    ]
    assert not check_linearizable(bad)
    # without the deadline the same history would pass: the deadline is what catches it
    free = [w("old", 0, 0.5, (X, b"1")), w("old", 1, None, (X, b"z")), *bad[2:]]
    assert check_linearizable(free)


def test_prefix_mode_forbids_a_later_write_without_an_earlier_one() -> None:
    h = [
        w("w", 0, None, (A, b"1")),
        w("w", 1, None, (B, b"1")),
        r("final", 5, 6, {B: b"1"}, all=True),
    ]
    assert check_linearizable(h)  # without prefix durability, a could be lost and b kept
    assert not check_linearizable(h, prefix=True)  # a WAL replays in order: b implies a


def test_program_order_of_pipelined_writes() -> None:
    # Two overlapping non-durable writes of one process take effect in call order.
    h = [w("w", 0, 5, (X, b"1")), w("w", 1, 5, (X, b"2")), r("r", 6, 7, {X: b"1"})]
    assert not check_linearizable(h)
    assert check_linearizable([*h[:2], r("r", 6, 7, {X: b"2"})])


def test_a_long_single_writer_history_with_readers_is_quick() -> None:
    rng = random.Random(7)
    h: list[Op] = []
    state: dict[bytes, bytes] = {}
    t = 0.0
    views: list[dict[bytes, bytes]] = [{}]
    for i in range(600):
        k = bytes([97 + rng.randrange(8)])
        v = str(i).encode()
        h.append(w("w", t, t + 0.5, (k, v)))
        state[k] = v
        views.append(dict(state))
        t += 1
    for p in range(3):
        pos = 0
        for _ in range(150):
            pos = min(len(views) - 1, pos + rng.randrange(0, 8))
            h.append(r(f"r{p}", pos, pos + 0.1, dict(views[pos]), all=True))
    v = check(h, strong={"w"}, prefix=True)
    assert v, v.reason
    assert v.explored < 50_000
    # the same history with one reader going back by one write fails
    bad = list(h)
    last = bad[-1]
    assert last.read is not None
    i = views.index(dict(last.read))
    bad.append(r("r2", 10_000, 10_001, dict(views[max(0, i - 3)]), all=True))
    if views[max(0, i - 3)] != views[i]:
        assert not check(bad, strong={"w"}, prefix=True)


def test_prefix_positions() -> None:
    writes = [((A, b"1"),), ((B, b"1"),), ((A, None),)]
    d = digests_of_prefixes({}, writes, state_digest)
    assert prefix_positions(d, [(d[0], 3), (d[2], 3), (d[3], 3)]) == [0, 2, 3]
    with pytest.raises(PrefixViolation, match="went back"):
        prefix_positions(d, [(d[2], 3), (d[1], 3)])
    with pytest.raises(PrefixViolation, match="no prefix"):
        prefix_positions(d, [(state_digest([(B, b"9")]), 3)])
    with pytest.raises(PrefixViolation, match="before it was issued"):
        prefix_positions(d, [(d[2], 1)])
