"""FaultInjectingStore: rule selection, actions, crash mode, call log, determinism."""

from __future__ import annotations

import pytest

from shaledb.errors import AlreadyExists, InvalidArgument, ObjectNotFound, Unavailable
from shaledb.store import ObjectStore
from shaledb.testing import Call, FaultInjectingStore, SimulatedCrash


def test_rules_select_by_operation_with_aliases(memory_store: ObjectStore) -> None:
    faults = FaultInjectingStore(memory_store, seed=1)
    rule = faults.add_rule("fail_before", ops="put")
    with pytest.raises(Unavailable):
        faults.put("a", b"1")
    with pytest.raises(Unavailable):
        faults.put("b", b"1", create=True)
    with pytest.raises(ObjectNotFound):
        faults.get("a")  # not selected, and nothing was applied
    assert rule.matched == rule.fired == 2
    faults.clear_rules()
    reads = faults.add_rule("fail_before", ops=["read"])
    faults.put("a", b"1")
    for call in (lambda: faults.get("a"), lambda: faults.head("a"), lambda: list(faults.list(""))):
        with pytest.raises(Unavailable):
            call()
    assert reads.fired == 3


def test_rules_select_by_path_prefix_and_regex(memory_store: ObjectStore) -> None:
    faults = FaultInjectingStore(memory_store, seed=2)
    faults.add_rule("fail_before", path_prefix="wal/")
    faults.add_rule("fail_before", path_regex=r"\.manifest$")
    faults.put("compacted/1.sst", b"")
    with pytest.raises(Unavailable):
        faults.put("wal/00001.sst", b"")
    with pytest.raises(Unavailable):
        faults.put("manifest/00001.manifest", b"")
    faults.put("manifest/00001.manifest.tmp", b"")


def test_nth_and_times(memory_store: ObjectStore) -> None:
    faults = FaultInjectingStore(memory_store, seed=3)
    third = faults.add_rule("fail_before", ops="get", nth=3)
    memory_store.put("k", b"v")
    outcomes = []
    for _ in range(5):
        try:
            faults.get("k")
            outcomes.append("ok")
        except Unavailable:
            outcomes.append("fail")
    assert outcomes == ["ok", "ok", "fail", "ok", "ok"]
    assert third.matched == 5 and third.fired == 1
    faults.clear_rules()
    twice = faults.add_rule("fail_before", ops="head", times=2)
    results = []
    for _ in range(4):
        try:
            faults.head("k")
            results.append(True)
        except Unavailable:
            results.append(False)
    assert results == [False, False, True, True]
    assert twice.fired == 2


def _pattern(seed: int, store: ObjectStore) -> list[bool]:
    faults = FaultInjectingStore(store, seed=seed)
    faults.add_rule("fail_before", ops="put", probability=0.3)
    out = []
    for i in range(200):
        try:
            faults.put(f"p/{i}", b"")
            out.append(True)
        except Unavailable:
            out.append(False)
    return out


def test_probability_is_seeded(memory_store: ObjectStore) -> None:
    a, b, c = _pattern(42, memory_store), _pattern(42, memory_store), _pattern(43, memory_store)
    assert a == b
    assert a != c
    assert 30 < a.count(False) < 90


def test_unseeded_store_prints_its_seed(
    memory_store: ObjectStore, capsys: pytest.CaptureFixture[str]
) -> None:
    faults = FaultInjectingStore(memory_store)
    assert f"seed={faults.seed}" in capsys.readouterr().out
    assert f"seed={faults.seed}" in repr(faults)


def test_apply_then_fail_applies(memory_store: ObjectStore) -> None:
    faults = FaultInjectingStore(memory_store, seed=4)
    faults.add_rule("apply_then_fail", ops=["put", "delete", "copy"])
    with pytest.raises(Unavailable, match="after put_create k"):
        faults.put("k", b"v", create=True)
    assert memory_store.get("k") == b"v"
    with pytest.raises(Unavailable):
        faults.copy("k", "k2")
    assert memory_store.get("k2") == b"v"
    with pytest.raises(Unavailable):
        faults.delete("k")
    with pytest.raises(ObjectNotFound):
        memory_store.get("k")


def test_apply_then_fail_hides_any_answer(memory_store: ObjectStore) -> None:
    """A lost response is ambiguous whatever the store answered: errors become Unavailable too."""
    memory_store.put("k", b"v")
    faults = FaultInjectingStore(memory_store, seed=10)
    rule = faults.add_rule("apply_then_fail", ops="put_create")
    with pytest.raises(Unavailable) as info:
        faults.put("k", b"other", create=True)
    assert isinstance(info.value.__cause__, AlreadyExists)
    assert rule.fired == 1 and rule.applied == 0
    with pytest.raises(Unavailable):
        faults.put("fresh", b"1", create=True)
    assert rule.fired == 2 and rule.applied == 1


def test_crash_stops_every_later_call(memory_store: ObjectStore) -> None:
    faults = FaultInjectingStore(memory_store, seed=5)
    faults.add_rule("crash", ops="put", nth=2)
    faults.put("a", b"1")
    with pytest.raises(SimulatedCrash):
        faults.put("b", b"2")
    assert faults.crashed
    for call in (lambda: faults.get("a"), lambda: faults.put("c", b""), lambda: faults.list("")):
        with pytest.raises(SimulatedCrash):
            call()
    assert [m.path for m in memory_store.list("")] == ["a"]  # the inner store lives on
    try:
        faults.get("a")
    except Exception:  # an engine's "except Exception" cannot swallow a crash
        pytest.fail("SimulatedCrash must not be an Exception")
    except SimulatedCrash:
        pass


def test_apply_then_crash_applies(memory_store: ObjectStore) -> None:
    faults = FaultInjectingStore(memory_store, seed=6)
    faults.add_rule("apply_then_crash", ops="put_create")
    with pytest.raises(SimulatedCrash):
        faults.put("k", b"v", create=True)
    assert memory_store.get("k") == b"v"
    with pytest.raises(SimulatedCrash):
        faults.head("k")


def test_crash_interrupts_a_listing_in_progress(memory_store: ObjectStore) -> None:
    for i in range(5):
        memory_store.put(f"l/{i}", b"")
    faults = FaultInjectingStore(memory_store, seed=7)
    it = faults.list("l/")
    assert next(it).path == "l/0"
    faults.crash()
    with pytest.raises(SimulatedCrash):
        next(it)


def test_call_log_enumerates_an_operation(memory_store: ObjectStore) -> None:
    """Record the calls of an operation once, then crash at each of them in turn."""

    def operation(st: ObjectStore) -> None:
        st.put("tmp/x", b"payload")
        st.copy("tmp/x", "final/x")
        st.delete("tmp/x")

    recorder = FaultInjectingStore(memory_store, seed=8)
    operation(recorder)
    assert recorder.calls == [Call("put", "tmp/x"), Call("copy", "final/x", "tmp/x"), Call("delete", "tmp/x")]
    for i in range(len(recorder.calls)):
        for action in ("crash", "apply_then_crash"):
            for p in [m.path for m in memory_store.list("")]:
                memory_store.delete(p)
            faults = FaultInjectingStore(memory_store, seed=8)
            faults.add_rule(action, nth=i + 1)  # type: ignore[arg-type]
            with pytest.raises(SimulatedCrash):
                operation(faults)
            assert len(faults.calls) == i + 1
    recorder.clear_calls()
    assert recorder.calls == []


def test_bad_rules_are_refused(memory_store: ObjectStore) -> None:
    faults = FaultInjectingStore(memory_store, seed=9)
    with pytest.raises(InvalidArgument):
        faults.add_rule("explode")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        faults.add_rule("crash", ops="frobnicate")
    with pytest.raises(InvalidArgument):
        faults.add_rule("crash", nth=0)
    with pytest.raises(InvalidArgument):
        faults.add_rule("crash", probability=1.5)
