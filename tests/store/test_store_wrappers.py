"""InstrumentedStore accounting, LatencyStore timing, NoConditionalStore."""

from __future__ import annotations

import random
import threading

import pytest
from store_testkit import ManualClock

from shaledb.errors import AlreadyExists, InvalidArgument, NotSupported, ObjectNotFound
from shaledb.store import OP_KINDS, InstrumentedStore, LatencyStore, NoConditionalStore, ObjectStore


def test_accounting_is_exact_for_a_scripted_sequence(memory_store: ObjectStore) -> None:
    st = InstrumentedStore(memory_store)
    st.put("a", b"12345")
    st.put("b", b"xy", create=True)
    with pytest.raises(AlreadyExists):
        st.put("b", b"zzz", create=True)
    assert st.get("a") == b"12345"
    assert st.get_range("a", 1, 3) == b"23"
    assert st.get_ranges("a", [(0, 1), (2, 4), (4, 9)]) == [b"1", b"34", b"5"]
    st.head("a")
    st.attributes("a")
    assert len(list(st.list(""))) == 2
    st.copy("a", "c")
    with pytest.raises(AlreadyExists):
        st.copy("a", "c", create=True)
    st.delete("c")
    with pytest.raises(ObjectNotFound):
        st.get("c")
    st.delete_many([])
    st.delete_many([f"bulk/{i}" for i in range(1001)])  # two S3 requests' worth

    snap = st.snapshot()
    assert dict(snap.requests) == {
        "get": 2,
        "get_range": 1,
        "get_ranges": 1,
        "head": 1,
        "attributes": 1,
        "put": 1,
        "put_create": 2,
        "list": 1,
        "delete": 1,
        "delete_many": 2,
        "copy": 1,
        "copy_create": 1,
    }
    # A missing object and a conditional write that found one are answers, not errors (a
    # healthy writer gets dozens a minute: an alert on errors would always fire).
    assert {k: v for k, v in snap.errors.items() if v} == {}
    assert snap.bytes_written == 5 + 2
    assert snap.bytes_read == 5 + 2 + 4
    assert snap.objects_listed == 2
    assert snap.total_requests == 15

    st.get("a")
    delta = st.snapshot() - snap
    assert delta.requests["get"] == 1 and delta.total_requests == 1 and delta.bytes_read == 5
    st.reset()
    empty = st.snapshot()
    assert empty.total_requests == 0 and empty.bytes_read == 0 and set(empty.requests) == set(OP_KINDS)


def test_accounting_is_thread_safe(memory_store: ObjectStore) -> None:
    st = InstrumentedStore(memory_store)

    def work(t: int) -> None:
        for i in range(300):
            st.put(f"t{t}/{i}", b"ab")
            st.get(f"t{t}/{i}")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    snap = st.snapshot()
    assert snap.requests["put"] == snap.requests["get"] == 2400
    assert snap.bytes_written == snap.bytes_read == 4800


@pytest.mark.parametrize("seed", [3, 4], ids=lambda s: f"seed={s}")
def test_latency_is_injected_on_the_clock(seed: int, memory_store: ObjectStore) -> None:
    clock = ManualClock()
    st = LatencyStore(memory_store, clock, base_s=0.05, jitter_s=0.02, rng=random.Random(seed))
    start = clock.monotonic()
    st.put("k", b"v")
    st.get("k")
    st.head("k")
    list(st.list(""))
    st.get_range("k", 0, 1)
    st.delete("k")
    assert len(clock.sleeps) == 6
    assert all(0.05 <= s <= 0.07 for s in clock.sleeps)
    assert clock.monotonic() - start == pytest.approx(sum(clock.sleeps))

    again = ManualClock()
    replay = LatencyStore(memory_store, again, base_s=0.05, jitter_s=0.02, rng=random.Random(seed))
    for _ in range(6):
        replay.put("x", b"")
    assert again.sleeps == clock.sleeps


def test_latency_without_jitter_is_constant(memory_store: ObjectStore, manual_clock: ManualClock) -> None:
    st = LatencyStore(memory_store, manual_clock, base_s=0.25)
    st.put("k", b"v")
    st.copy("k", "k2")
    assert manual_clock.sleeps == [0.25, 0.25]
    with pytest.raises(InvalidArgument):
        LatencyStore(memory_store, manual_clock, base_s=-1)


def test_no_conditional_store_refuses_create(memory_store: ObjectStore) -> None:
    st = NoConditionalStore(memory_store)
    assert not st.supports_conditional_put
    assert st.supports_attributes
    with pytest.raises(NotSupported, match="conditional"):
        st.put("k", b"v", create=True)
    st.put("k", b"v")
    with pytest.raises(NotSupported):
        st.copy("k", "k2", create=True)
    st.copy("k", "k2")
    assert st.get("k2") == b"v"
    assert st.describe() == memory_store.describe()


def test_failed_calls_are_counted_as_errors(memory_store: ObjectStore) -> None:
    from shaledb.errors import Unavailable
    from shaledb.testing import FaultInjectingStore

    faults = FaultInjectingStore(memory_store, seed=1)
    st = InstrumentedStore(faults)
    st.put("a", b"1")
    faults.add_rule("fail_before", ops="read", times=2)
    for _ in range(2):
        with pytest.raises(Unavailable):
            st.get("a")
    with pytest.raises(ObjectNotFound):
        st.get("missing")
    assert {k: v for k, v in st.snapshot().errors.items() if v} == {"get": 2}
