"""A plain ``Db.open`` may not create a database inside another database's root, nor
around one (shaledb.store.new_root): on every store kind, both ways, and only when
creating -- opening an existing database costs no extra request."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from shaledb import Db, InvalidArgument, Settings, admin
from shaledb.bulk.ingest import ingest_columns
from shaledb.clock import SYSTEM_CLOCK
from shaledb.store import drop_memory_store, open_store
from shaledb.store.new_root import check_new_root
from shaledb.store.stack import wrap_store
from shaledb.testing.faultproxy import FaultProxy

QUIET = Settings(compactor=None, garbage_collector=None)


@pytest.fixture(params=["memory", "local", "s3"])
def place(
    request: pytest.FixtureRequest, tmp_path: Path, s3_url_factory: Callable[[], Any]
) -> Iterator[tuple[str, dict[str, Any] | None]]:
    """A base URL under which the test creates databases, and the store options."""
    if request.param == "memory":
        name = f"nest-{uuid.uuid4().hex}"
        yield f"memory://{name}", None
        drop_memory_store(name)
    elif request.param == "local":
        yield str(tmp_path), None
    else:
        loc = s3_url_factory()
        yield loc.url, loc.options


def _make(url: str, options: dict[str, Any] | None) -> None:
    with Db.open(url, settings=QUIET, store_options=options) as db:
        db.put(b"k", b"v", durable=True)


def _open(url: str, options: dict[str, Any] | None, **kw: Any) -> Db:
    return Db.open(url, settings=QUIET, store_options=options, **kw)


@pytest.mark.parametrize("inner", ["p/tmp/new", "p/wal/x", "p/a/b/c"])
def test_a_new_database_inside_another_ones_root_is_refused(
    place: tuple[str, dict[str, Any] | None], inner: str
) -> None:
    base, options = place
    _make(f"{base}/p", options)
    with pytest.raises(
        InvalidArgument, match=rf"database \S+/{inner} lies inside the root of database \S+/p\b"
    ):
        _open(f"{base}/{inner}", options)
    with _open(f"{base}/p", options, create_if_missing=False) as db:  # the outer one is untouched
        assert db.get(b"k") == b"v"
        assert not [m.path for m in db.store.list("") if m.path.startswith(inner.split("/", 1)[1])]
    if not base.startswith(("memory:", "s3:")):
        assert not Path(base, inner).exists()  # nothing created by the refused call


@pytest.mark.parametrize(("outer", "inner"), [("o", "o/p"), ("o", "o/x/y/p")])
def test_a_new_database_around_an_existing_one_is_refused(
    place: tuple[str, dict[str, Any] | None], outer: str, inner: str
) -> None:
    base, options = place
    _make(f"{base}/{inner}", options)
    with pytest.raises(
        InvalidArgument, match=rf"database \S+/{outer} contains the root of database \S+/{inner}\b"
    ):
        _open(f"{base}/{outer}", options)
    with _open(f"{base}/{inner}", options, create_if_missing=False) as db:
        assert db.get(b"k") == b"v"


def test_siblings_and_reopening_are_fine(place: tuple[str, dict[str, Any] | None]) -> None:
    base, options = place
    _make(f"{base}/p", options)
    _make(f"{base}/p2", options)  # a name that merely starts like another's
    _make(f"{base}/q/r", options)
    with _open(f"{base}/p", options) as db:
        assert db.get(b"k") == b"v"


def test_a_bulk_ingest_creating_a_database_is_checked_too(place: tuple[str, dict[str, Any] | None]) -> None:
    base, options = place
    _make(f"{base}/p", options)
    with pytest.raises(InvalidArgument, match="lies inside the root of"):
        ingest_columns(f"{base}/p/tmp/i", [b"a"], [b"1"], settings=QUIET, store_options=options)


def test_opening_an_existing_database_does_not_run_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = str(tmp_path / "db")
    _make(url, None)

    def boom(*args: Any) -> None:
        raise AssertionError("the nesting check ran for an existing database")

    monkeypatch.setattr("shaledb.db.writer.check_new_root", boom)
    with _open(url, None) as db:
        assert db.get(b"k") == b"v"


def test_the_check_costs_one_listing_plus_one_per_folder_above_on_s3(
    moto_endpoint: str, s3_url_factory: Callable[[], Any]
) -> None:
    """Counted at the S3 server (through a fault proxy that injects nothing): creating
    s3://bucket/t/<id>/db lists the new root once and t/<id>/, t/ and the bucket's top once each."""
    loc = s3_url_factory()
    with FaultProxy(moto_endpoint, seed=1) as proxy:
        options = {**loc.options, "endpoint": proxy.url}
        url = f"{loc.url}/db"
        store = wrap_store(open_store(url, **options), QUIET, SYSTEM_CLOCK, random.Random(1))
        before = proxy.counts["pass"]
        check_new_root(url, store, options, QUIET, SYSTEM_CLOCK)
        assert proxy.counts["pass"] - before == 1 + 3
        store.close()


def test_a_clone_created_inside_or_around_an_unrelated_database_is_refused(
    place: tuple[str, dict[str, Any] | None],
) -> None:
    """Clone creation checked its parent and ancestors only; any other database counts too."""
    base, options = place
    _make(f"{base}/parent", options)
    _make(f"{base}/other", options)
    _make(f"{base}/wrap/inner", options)
    with pytest.raises(InvalidArgument, match=r"lies inside the root of database \S+/other\b"):
        Db.open_from_checkpoint(
            f"{base}/other/tmp/c", f"{base}/parent", settings=QUIET, store_options=options
        )
    with pytest.raises(InvalidArgument, match=r"contains the root of database \S+/wrap/inner\b"):
        Db.open_from_checkpoint(f"{base}/wrap", f"{base}/parent", settings=QUIET, store_options=options)
    assert admin.list_checkpoints(f"{base}/parent", store_options=options) == []  # nothing pinned
    with Db.open_from_checkpoint(f"{base}/c", f"{base}/parent", settings=QUIET, store_options=options) as c:
        assert c.get(b"k") == b"v"


def test_a_store_passed_in_without_store_options_is_not_checked_with_other_credentials(
    s3_url_factory: Callable[[], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A caller that passes its S3 stores (``store=``, ``parent_store=``) and no store options
    gave no credentials for the folders above them: creating a clone or a database there
    checks the new root only, rather than listing the bucket with the default credentials
    (none here: it raised PermissionDenied, as the crash soak's reopening of a clone whose
    creation was killed before its first manifest did)."""
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    parent, clone, plain = s3_url_factory(), s3_url_factory(), s3_url_factory()
    _make(parent.url, parent.options)
    cstore, pstore = open_store(clone.url, **clone.options), open_store(parent.url, **parent.options)
    store = open_store(plain.url, **plain.options)
    try:
        with Db.open_from_checkpoint(
            clone.url, parent.url, settings=QUIET, store=cstore, parent_store=pstore
        ) as c:
            assert c.get(b"k") == b"v"
        with Db.open(plain.url, settings=QUIET, store=store) as db:
            db.put(b"k", b"new", durable=True)
    finally:
        for s in (cstore, pstore, store):
            s.close()
