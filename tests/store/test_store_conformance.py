"""Every backend and wrapper stack passes the same conformance suite."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from shaledb.settings import RetryOptions
from shaledb.store import (
    InstrumentedStore,
    LatencyStore,
    NoConditionalStore,
    ObjectStore,
    RetryingStore,
    TwoPhaseStore,
    open_store,
)
from shaledb.testing import FaultInjectingStore
from shaledb.testing.store_suite import StoreTests


class TestMemory(StoreTests):
    @pytest.fixture
    def store(self, memory_store: ObjectStore) -> ObjectStore:
        return memory_store


class TestMemorySubPrefix(StoreTests):
    """A memory store rooted below a shared name sees only its own objects."""

    many_objects = 20

    @pytest.fixture
    def store(self, memory_store: ObjectStore) -> ObjectStore:
        memory_store.put("outside/neighbour", b"n")
        memory_store.put("db", b"sibling with the root's name")
        name = memory_store.describe().removeprefix("memory://")
        return open_store(f"memory://{name}/db/sub")


class TestLocal(StoreTests):
    @pytest.fixture
    def store(self, local_store: ObjectStore) -> ObjectStore:
        return local_store


class TestS3(StoreTests):
    @pytest.fixture
    def store(self, s3_url_factory: Callable[..., ObjectStore]) -> ObjectStore:
        return s3_url_factory().open()  # type: ignore[attr-defined, no-any-return]


class TestWrapperStack(StoreTests):
    """Retrying over instrumented over latency over a rule-less fault injector."""

    @pytest.fixture
    def store(self, memory_store: ObjectStore, manual_clock: object) -> ObjectStore:
        faults = FaultInjectingStore(memory_store, seed=1)
        slow = LatencyStore(faults, manual_clock, 0.001, 0.001, random.Random(2))  # type: ignore[arg-type]
        return RetryingStore(InstrumentedStore(slow), RetryOptions(), manual_clock, random.Random(3))  # type: ignore[arg-type]


class TestTwoPhaseMemory(StoreTests):
    @pytest.fixture
    def store(self, memory_store: ObjectStore, tmp_path: Path) -> Iterator[ObjectStore]:
        st = TwoPhaseStore(NoConditionalStore(memory_store), str(tmp_path / "cas.db"), rng=random.Random(4))
        yield st
        st.close()


class TestTwoPhaseLocal(StoreTests):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[ObjectStore]:
        st = open_store(str(tmp_path / "db"), cas=f"sqlite://{tmp_path / 'cas.db'}")
        assert isinstance(st, TwoPhaseStore)
        yield st
        st.close()


class TestTwoPhaseS3(StoreTests):
    many_objects = 1_010

    @pytest.fixture
    def store(self, s3_url_factory: Callable[..., object], tmp_path: Path) -> Iterator[ObjectStore]:
        loc = s3_url_factory()
        inner = loc.open(cas="none")  # type: ignore[attr-defined]
        st = TwoPhaseStore(inner, str(tmp_path / "cas.db"), rng=random.Random(5))
        yield st
        st.close()
