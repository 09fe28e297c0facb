"""Journal compaction whose manifest update fails after the create landed keeps its outputs.

``ManifestStore`` lists the newer versions right after its create; when that listing fails
the update raises although the new manifest is live. Deleting the outputs then would leave
the live manifest naming deleted journal objects and SSTs (found in a design review).
"""

from __future__ import annotations

from typing import Any

import shaledb
from shaledb import Settings
from shaledb.errors import ShaleError, Unavailable
from shaledb.settings import RetryOptions
from shaledb.store.url import open_store
from shaledb.store.wrappers import StoreWrapper


class _FailListAfterCreate(StoreWrapper):
    """Fails the first ``manifest/`` listing after a manifest create, once armed."""

    armed = False
    tripped = False

    def put(self, path: str, data: Any, *, create: bool = False, **kw: Any) -> Any:
        out = self.inner.put(path, data, create=create, **kw)
        if self.armed and create and path.startswith("manifest/"):
            self.tripped = True
        return out

    def list(self, prefix: str, *, offset: str | None = None) -> Any:
        if self.tripped and prefix.startswith("manifest"):
            self.tripped = self.armed = False
            raise Unavailable("injected: the listing after the commit's create failed")
        return self.inner.list(prefix, offset=offset)


def test_landed_commit_keeps_its_outputs() -> None:
    inner = open_store("memory://journal-ambiguous-commit")
    store = _FailListAfterCreate(inner)
    settings = Settings(
        value_separation_threshold=64,
        compactor=None,
        garbage_collector=None,
        retry=RetryOptions(max_attempts=1, timeout_s=0.5),
    )
    db = shaledb.Db.open(store=store, settings=settings)
    expected: dict[bytes, bytes] = {}
    for r in range(3):
        for i in range(50 if r == 0 else 45):
            key, value = b"k%03d" % i, bytes([r]) * 200
            db.put(key, value, durable=False)
            expected[key] = value
        db.flush(memtable=True)
    store.armed = True
    try:
        db.compact_journal()
    except ShaleError:
        pass  # the update's outcome was ambiguous: the caller sees an error, nothing is lost
    store.armed = False
    m = db.refresh_manifest()
    stored = {p.path for p in inner.list("")}
    for s in m.data.ssts():
        assert any(p.endswith(f"{s.id}.sst") for p in stored), f"live SST {s.id} was deleted"
    assert {k: db.get(k) for k in expected} == expected
    db.close()
