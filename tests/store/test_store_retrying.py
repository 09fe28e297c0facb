"""RetryingStore: backoff and its bounds, what is never retried, ambiguous conditional puts."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from store_testkit import ManualClock

from shaledb.errors import AlreadyExists, InvalidPathError, ObjectNotFound, Unavailable
from shaledb.settings import RetryOptions
from shaledb.store import PUT_ID_ATTRIBUTE, ObjectMeta, ObjectStore, RetryingStore, StoreWrapper
from shaledb.testing import FaultInjectingStore

OPTS = RetryOptions(max_attempts=6, initial_backoff_s=0.1, max_backoff_s=1.0, timeout_s=60.0)


class HookClock(ManualClock):
    """A manual clock that runs a callback on each sleep (to act between attempts)."""

    def __init__(self, on_sleep: Callable[[], None]) -> None:
        super().__init__()
        self._on_sleep = on_sleep

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        self._on_sleep()


def retrying(
    inner: ObjectStore, clock: ManualClock, seed: int = 0, opts: RetryOptions = OPTS
) -> RetryingStore:
    return RetryingStore(inner, opts, clock, random.Random(seed))


def ops(faults: FaultInjectingStore) -> list[str]:
    return [c.op for c in faults.calls]


@pytest.mark.parametrize("fixture", ["memory_store", "local_store"])
def test_transient_failures_are_retried(
    fixture: str, request: pytest.FixtureRequest, manual_clock: ManualClock
) -> None:
    faults = FaultInjectingStore(request.getfixturevalue(fixture), seed=11)
    faults.add_rule("fail_before", ops="read", times=2)
    faults.add_rule("fail_before", ops="write", times=2)
    st = retrying(faults, manual_clock)
    st.put("a", b"1")
    assert st.get("a") == b"1"
    assert [m.path for m in st.list("")] == ["a"]
    st.delete("a")
    assert st.retries == 4
    assert len(manual_clock.sleeps) == 4


def test_ambiguous_create_resolved_by_put_id(memory_store: ObjectStore, manual_clock: ManualClock) -> None:
    faults = FaultInjectingStore(memory_store, seed=12)
    rule = faults.add_rule("apply_then_fail", ops="put_create", nth=1)
    st = retrying(faults, manual_clock)
    st.put("manifest/1", b"payload", create=True, attributes={"k": "v"})
    assert rule.fired == 1
    assert st.ambiguities_resolved == 1
    assert ops(faults) == ["put_create", "put_create", "attributes"]
    stored = memory_store.attributes("manifest/1")
    assert stored["k"] == "v"
    assert len(stored[PUT_ID_ATTRIBUTE]) == 32
    assert memory_store.get("manifest/1") == b"payload"


def test_ambiguous_create_resolved_by_bytes(local_store: ObjectStore, manual_clock: ManualClock) -> None:
    assert not local_store.supports_attributes
    faults = FaultInjectingStore(local_store, seed=13)
    faults.add_rule("apply_then_fail", ops="put_create", nth=1)
    st = retrying(faults, manual_clock)
    st.put("wal/1", b"epoch=7 nonce=81f2", create=True)
    assert st.ambiguities_resolved == 1
    assert ops(faults) == ["put_create", "put_create", "get"]


@pytest.mark.parametrize("fixture", ["memory_store", "local_store"])
def test_ambiguous_create_that_lost_the_race_is_reported(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    inner: ObjectStore = request.getfixturevalue(fixture)
    faults = FaultInjectingStore(inner, seed=14)
    faults.add_rule("fail_before", ops="put_create", nth=1)  # ambiguous for us, but not applied
    clock = HookClock(
        lambda: inner.put("m/1", b"other writer", create=True) if not faults.calls[1:] else None
    )
    st = retrying(faults, clock)
    with pytest.raises(AlreadyExists):
        st.put("m/1", b"our payload", create=True)
    assert st.ambiguities_resolved == 0
    assert inner.get("m/1") == b"other writer"


def test_empty_payload_is_never_claimed_by_bytes(local_store: ObjectStore, manual_clock: ManualClock) -> None:
    faults = FaultInjectingStore(local_store, seed=15)
    faults.add_rule("apply_then_fail", ops="put_create", nth=1)
    st = retrying(faults, manual_clock)
    with pytest.raises(AlreadyExists):
        st.put("fence", b"", create=True)
    assert st.ambiguities_resolved == 0


def test_plain_conflict_checks_put_id_but_not_bytes(
    memory_store: ObjectStore, local_store: ObjectStore, manual_clock: ManualClock
) -> None:
    for inner, check in ((memory_store, ["attributes"]), (local_store, [])):
        inner.put("taken", b"same bytes")
        faults = FaultInjectingStore(inner, seed=16)
        st = retrying(faults, manual_clock)
        with pytest.raises(AlreadyExists):
            st.put("taken", b"same bytes", create=True)
        assert ops(faults) == ["put_create", *check]
        assert st.retries == 0


def test_ambiguous_copy_create_resolved(local_store: ObjectStore, manual_clock: ManualClock) -> None:
    local_store.put("src", b"unique payload 1")
    faults = FaultInjectingStore(local_store, seed=17)
    faults.add_rule("apply_then_fail", ops="copy_create", nth=1)
    st = retrying(faults, manual_clock)
    st.copy("src", "dst", create=True)
    assert st.ambiguities_resolved == 1
    local_store.put("src2", b"unique payload 2")
    with pytest.raises(AlreadyExists):
        st.copy("src2", "dst", create=True)


@pytest.mark.parametrize("seed", [1, 2, 3], ids=lambda s: f"seed={s}")
def test_many_creates_under_ambiguous_faults(
    seed: int, memory_store: ObjectStore, local_store: ObjectStore
) -> None:
    print(f"seed={seed}")
    for inner in (memory_store, local_store):
        clock = ManualClock()
        faults = FaultInjectingStore(inner, seed=seed)
        ambiguous = faults.add_rule("apply_then_fail", ops="put_create", probability=0.2)
        faults.add_rule("fail_before", ops=["put_create", "attributes", "get"], probability=0.1)
        st = RetryingStore(faults, RetryOptions(max_attempts=50), clock, random.Random(seed))
        for i in range(150):
            st.put(f"m/{i:04d}", f"manifest {i} nonce {seed}-{i}".encode(), create=True)
        for i in range(150):
            assert inner.get(f"m/{i:04d}") == f"manifest {i} nonce {seed}-{i}".encode()
        assert ambiguous.applied > 10
        assert st.ambiguities_resolved == ambiguous.applied


def test_exhaustion_raises_unavailable(memory_store: ObjectStore, manual_clock: ManualClock) -> None:
    faults = FaultInjectingStore(memory_store, seed=18)
    rule = faults.add_rule("fail_before", ops="get")
    memory_store.put("k", b"v")
    st = retrying(faults, manual_clock)
    with pytest.raises(Unavailable, match="after 6 attempt") as info:
        st.get("k")
    assert rule.fired == OPTS.max_attempts
    assert isinstance(info.value.__cause__, Unavailable)
    sleeps = manual_clock.sleeps
    assert len(sleeps) == OPTS.max_attempts - 1
    for attempt, slept in enumerate(sleeps, start=1):
        base = min(OPTS.max_backoff_s, OPTS.initial_backoff_s * 2 ** (attempt - 1))
        assert base / 2 <= slept <= base


def test_timeout_bounds_the_retries(memory_store: ObjectStore, manual_clock: ManualClock) -> None:
    faults = FaultInjectingStore(memory_store, seed=19)
    faults.add_rule("fail_before", ops="put")
    opts = RetryOptions(max_attempts=1000, initial_backoff_s=1.0, max_backoff_s=1.0, timeout_s=5.0)
    st = retrying(faults, manual_clock, opts=opts)
    start = manual_clock.monotonic()
    with pytest.raises(Unavailable):
        st.put("k", b"v")
    assert manual_clock.monotonic() - start <= 5.0
    assert 5 <= len(faults.calls) <= 11


def test_backoff_is_reproducible_from_the_seed(memory_store: ObjectStore) -> None:
    def sleeps(seed: int) -> list[float]:
        clock = ManualClock()
        faults = FaultInjectingStore(memory_store, seed=20)
        faults.add_rule("fail_before", ops="head")
        with pytest.raises(Unavailable):
            retrying(faults, clock, seed=seed).head("x")
        return clock.sleeps

    assert sleeps(5) == sleeps(5)
    assert sleeps(5) != sleeps(6)


@pytest.mark.parametrize(
    ("action", "error"),
    [
        (lambda st: st.get("missing"), ObjectNotFound),
        (lambda st: st.get("../escape"), InvalidPathError),
        (lambda st: st.put("exists", b"x", create=True), AlreadyExists),
    ],
    ids=["not-found", "invalid-path", "already-exists"],
)
def test_facts_are_not_retried(
    action: Callable[[ObjectStore], Any],
    error: type[Exception],
    local_store: ObjectStore,
    manual_clock: ManualClock,
) -> None:
    local_store.put("exists", b"1")
    faults = FaultInjectingStore(local_store, seed=21)
    st = retrying(faults, manual_clock)
    with pytest.raises(error):
        action(st)
    assert len(faults.calls) <= 1
    assert manual_clock.sleeps == []


class BrokenListing(StoreWrapper):
    """Its listings fail after ``every`` items, ``times`` times in all."""

    def __init__(self, inner: ObjectStore, every: int, times: int) -> None:
        super().__init__(inner)
        self.every, self.times, self.offsets = every, times, []  # type: ignore[var-annotated]

    def list(self, prefix: str, *, offset: str | None = None) -> Iterator[ObjectMeta]:
        self.offsets.append(offset)
        return self._list(prefix, offset)

    def _list(self, prefix: str, offset: str | None) -> Iterator[ObjectMeta]:
        for n, meta in enumerate(self.inner.list(prefix, offset=offset)):
            if n == self.every and self.times > 0:
                self.times -= 1
                raise Unavailable("connection reset while listing")
            yield meta


def test_listing_resumes_after_the_last_delivered_path(
    memory_store: ObjectStore, manual_clock: ManualClock
) -> None:
    names = [f"l/{i:03d}" for i in range(30)]
    for n in names:
        memory_store.put(n, b"")
    broken = BrokenListing(memory_store, every=7, times=3)
    st = retrying(broken, manual_clock)
    assert [m.path for m in st.list("l/")] == names
    assert broken.offsets == [None, "l/006", "l/013", "l/020"]


def test_ambiguous_create_on_s3(s3_url_factory: Callable[[], Any], manual_clock: ManualClock) -> None:
    """The put id travels as S3 user metadata through a real S3 API (moto)."""
    inner = s3_url_factory().open()
    faults = FaultInjectingStore(inner, seed=22)
    faults.add_rule("apply_then_fail", ops="put_create", nth=1)
    st = retrying(faults, manual_clock)
    st.put("manifest/1", b"epoch 1 nonce 9", create=True)
    assert st.ambiguities_resolved == 1
    assert len(inner.attributes("manifest/1")[PUT_ID_ATTRIBUTE]) == 32
    with pytest.raises(AlreadyExists):
        retrying(inner, manual_clock, seed=23).put("manifest/1", b"epoch 2 nonce 3", create=True)


class Silent(StoreWrapper):
    """Each get waits ``wait_s`` on the clock (a request timeout), then fails."""

    def __init__(self, inner: ObjectStore, clock: ManualClock, wait_s: float) -> None:
        super().__init__(inner)
        self.clock, self.wait_s = clock, wait_s

    def get(self, path: str) -> bytes:
        self.clock.advance(self.wait_s)
        raise Unavailable("HTTP error: operation timed out")


def test_a_store_that_stays_silent_is_reported_while_retrying(
    memory_store: ObjectStore, manual_clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """An endpoint that accepts and never answers fails each attempt at its request timeout: the
    caller heard nothing for a minute. Past SLOW_RETRY_S, each retry is a WARNING."""
    st = retrying(Silent(memory_store, manual_clock, 30.0), manual_clock)
    with caplog.at_level("WARNING", logger="shaledb"), pytest.raises(Unavailable, match="failed after"):
        st.get("k")
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1 and "get k has failed for 30s (attempt 1 of 6" in warned[0]
    assert "up to 60s in all (RetryOptions.timeout_s)" in warned[0]
    caplog.clear()
    quick = retrying(Silent(memory_store, manual_clock, 0.0), manual_clock)
    with caplog.at_level("WARNING", logger="shaledb"), pytest.raises(Unavailable):
        quick.get("k")  # six quick failures within a few seconds of backoff: no warning
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


class Outage(StoreWrapper):
    """Fails every call fast (a refused connection) until ``clock`` passes ``until``."""

    def __init__(self, inner: ObjectStore, clock: ManualClock, until: float) -> None:
        super().__init__(inner)
        self.clock, self.until, self.calls = clock, until, 0

    def get(self, path: str) -> bytes:
        self.calls += 1
        if self.clock.monotonic() < self.until:
            raise Unavailable("HTTP error: error sending request (connection refused)")
        return self.inner.get(path)


def test_default_budget_rides_out_a_30s_outage_of_a_store_failing_fast(
    memory_store: ObjectStore, manual_clock: ManualClock
) -> None:
    """The documented budget is a minute (RetryOptions.timeout_s); max_attempts=10 spent it in
    about 7 s on a store refusing connections, so a writer stopped in an outage of seconds."""
    memory_store.put("k", b"v")
    start = manual_clock.monotonic()
    store = Outage(memory_store, manual_clock, start + 30.0)
    st = RetryingStore(store, RetryOptions(), manual_clock, random.Random(7))
    assert st.get("k") == b"v"
    assert 30.0 <= manual_clock.monotonic() - start <= 33.0
    forever = RetryingStore(Outage(memory_store, manual_clock, float("inf")), RetryOptions(), manual_clock)
    start = manual_clock.monotonic()
    with pytest.raises(Unavailable, match="failed after"):
        forever.get("k")
    assert 58.0 <= manual_clock.monotonic() - start <= 60.0  # the timeout, not the attempts, ends it


def test_an_outage_is_one_warning_and_one_line_when_it_ends(
    memory_store: ObjectStore, manual_clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A WARNING per retry past 5 s printed ~25 lines per waiting call in a minute's outage (and a
    reader prefetching 16 WAL objects printed 16 a second). Now the first call failing past 5 s
    says so, later ones are quiet while that outage stands, and the first failed call to get an
    answer -- a missing object is an answer -- says at INFO that the store answers again."""
    memory_store.put("k", b"v")
    start = manual_clock.monotonic()
    store = Outage(memory_store, manual_clock, start + 40.0)
    st = RetryingStore(store, RetryOptions(timeout_s=25.0), manual_clock, random.Random(8))
    with caplog.at_level("INFO", logger="shaledb"):
        with pytest.raises(Unavailable, match="failed after"):
            st.get("k")  # spends its 25 s
        with pytest.raises(ObjectNotFound):
            st.get("missing")  # fails past 5 s too, then the store answers: not found
        assert st.get("k") == b"v"
    assert store.calls > 20
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0][0] == "WARNING" and "get k has failed for" in lines[0][1]
    assert lines[1][0] == "INFO" and "the store answers again (get missing, attempt" in lines[1][1]
    assert "it failed for 4" in lines[1][1]
    caplog.clear()
    store.until = manual_clock.monotonic() + 10.0
    with caplog.at_level("INFO", logger="shaledb"):
        assert st.get("k") == b"v"  # a second outage is reported again
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO"]
