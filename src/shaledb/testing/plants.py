"""Planted bugs: faults patched into shaledb from the test side, as a yardstick for the checks.

Each plant replaces one piece of a protocol with a plausible wrong version
(the bug someone could write); nothing in the product knows about them. A
test plants one with :func:`planted` and asserts that the check meant to
guard the protocol now *fails* (tests/reliability/test_reliability_planted.py,
table in docs/reliability.md). A child process of the crash soak plants
``SHALEDB_TEST_PLANT`` at start (:func:`plant_from_env`), so a kill test can
be run against a bug too.

Plants patch attributes of the modules that own the code; if a module moves,
the import here fails loudly rather than a plant silently doing nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

Patch = tuple[Any, str, Any]


def _ack_before_wal() -> list[Patch]:
    """A durable write is acknowledged before its WAL object is written."""
    from ..db.writer import Db

    def durable_off(orig: Callable[..., Any]) -> Callable[..., Any]:
        def f(self: Any, *args: Any, durable: bool = True, **kw: Any) -> Any:
            return orig(self, *args, durable=False, **kw)

        return f

    return [(Db, name, durable_off(getattr(Db, name))) for name in ("put", "delete", "write")]


def _skip_epoch_check() -> list[Patch]:
    """The WAL writer, finding its slot taken by a newer writer's fence, skips the slot
    instead of stopping: the writer's epoch is never checked against the fence."""
    from ..engine.wal import WalWriter

    return [(WalWriter, "_collision", lambda self, wal_id, ours: False)]


def _gc_ignores_min_age() -> list[Patch]:
    """The garbage collector deletes unreferenced objects whatever their age."""
    from ..admin.gc import GarbageCollector

    orig = GarbageCollector.run_once

    def run_once(self: Any, *, dry_run: bool | None = None, min_age_s: float | None = None) -> Any:
        return orig(self, dry_run=dry_run, min_age_s=0.0)

    return [(GarbageCollector, "run_once", run_once)]


def _reader_skips_wal_gap() -> list[Patch]:
    """A reader finding a WAL object missing skips to the next id without asking the
    manifest whether the object was flushed and collected (its writes then in an SST)."""
    from ..db.reader import DbReader

    def after_missing(self: Any, wid: int) -> bool:
        if self._latest.next_wal_id <= wid + 1:
            return False
        with self._lock:
            self._next_wal = wid + 1
        return True

    return [(DbReader, "_after_missing", after_missing)]


def _tombstone_dropped_early() -> list[Patch]:
    """Compaction drops tombstones in every output, not only at the bottom of the tree."""
    from ..compaction import executor

    orig = executor.drop_dead

    def drop_dead(cols: Any, *, bottom: bool, now_ms: int) -> Any:
        return orig(cols, bottom=True, now_ms=now_ms)

    return [(executor, "drop_dead", drop_dead)]


def _clone_init_not_idempotent() -> list[Patch]:
    """A retried clone creation pins the parent again under a new checkpoint id instead of
    reusing the one an earlier attempt created: every interrupted creation leaks a
    checkpoint in the parent, which then keeps the parent's objects forever."""
    import uuid

    from ..admin import clone

    orig = clone._pin_in_parent

    def pin_in_parent(pms: Any, cp_id: Any, *args: Any) -> None:
        if pms.require_latest().checkpoint(cp_id) is not None:
            cp_id = uuid.uuid4()
        orig(pms, cp_id, *args)

    return [(clone, "_pin_in_parent", pin_in_parent)]


def _manifest_cas_as_overwrite() -> list[Patch]:
    """A manifest version is written with a plain put: two writers of the same id both
    'succeed' and the later one silently replaces the other's change."""
    from ..format import paths
    from ..manifest.invariants import check_transition
    from ..manifest.store import ManifestStore

    def write_new(self: Any, m: Any, current: Any) -> Any:
        check_transition(current, m)
        data, nonce, prev = self._encode(m, current)
        self.store.put(paths.manifest_path(m.id), data)
        self._note_nonces(m.id, nonce, prev)
        with self._lock:
            self._cache[m.id] = m
            self._latest_id = m.id
        return m

    return [(ManifestStore, "write_new", write_new)]


def _journal_drops_live_value() -> list[Patch]:
    """Journal compaction drops a value that is still the live version of its key."""
    from ..journal import scoring

    orig = scoring._Ledger.decide

    def decide(self: Any, key: bytes, seq: int, kind: int, payload: bytes | None) -> int:
        got = orig(self, key, seq, kind, payload)
        return scoring.DROP if got == scoring.KEEP and key.endswith(b"3") else got

    return [(scoring._Ledger, "decide", decide)]


def _wal_replay_drops_last_object() -> list[Patch]:
    """Recovery replays the WAL objects before the newest one only (an off-by-one in
    the replay range): the last group commit before a crash is lost."""
    from ..engine import recovery

    orig = recovery.replay_wal  # called through the module by confirm_and_replay

    def replay_wal(store: Any, m: Any, fence_id: int, **kw: Any) -> Any:
        return orig(store, m, fence_id - 1, **kw)

    return [(recovery, "replay_wal", replay_wal)]


PLANTS: dict[str, Callable[[], list[Patch]]] = {
    "ack_before_wal": _ack_before_wal,
    "skip_epoch_check": _skip_epoch_check,
    "gc_ignores_min_age": _gc_ignores_min_age,
    "reader_skips_wal_gap": _reader_skips_wal_gap,
    "tombstone_dropped_early": _tombstone_dropped_early,
    "clone_init_not_idempotent": _clone_init_not_idempotent,
    "manifest_cas_as_overwrite": _manifest_cas_as_overwrite,
    "journal_drops_live_value": _journal_drops_live_value,
    "wal_replay_drops_last_object": _wal_replay_drops_last_object,
}


@contextmanager
def planted(name: str) -> Iterator[None]:
    """Plant bug ``name`` (a key of :data:`PLANTS`) for the duration of the block."""
    patches = PLANTS[name]()
    saved = [(obj, attr, obj.__dict__.get(attr, _MISSING)) for obj, attr, _ in patches]
    try:
        for obj, attr, new in patches:
            setattr(obj, attr, new)
        yield
    finally:
        for obj, attr, old in reversed(saved):
            if old is _MISSING:
                delattr(obj, attr)
            else:
                setattr(obj, attr, old)


_MISSING = object()


def plant_from_env() -> str | None:
    """Plant ``SHALEDB_TEST_PLANT`` for the rest of this process (soak children)."""
    name = os.environ.get("SHALEDB_TEST_PLANT")
    if name:
        for obj, attr, new in PLANTS[name]():
            setattr(obj, attr, new)
    return name


__all__ = ["PLANTS", "plant_from_env", "planted"]
