"""Issue 27: one query surface on every handle, public types that say what they take and return.

* The public signatures of the handles, batches, transactions, ``shaledb.admin`` and
  ``shaledb.aio`` name no ``Any`` (read with ``inspect`` and ``typing.get_type_hints``).
* Keys, values and bounds may be any bytes-like object (``bytes``, ``bytearray``,
  ``memoryview``) wherever a handle takes them, and are stored as ``bytes``.
* ``Db``, ``Snapshot``, ``DbReader`` and ``ReaderSnapshot`` answer the same reads.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
import typing
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import shaledb
import shaledb.admin
import shaledb.aio
import shaledb.engine.changes
from shaledb import Db, DbReader, InvalidArgument, Settings, WriteBatch
from shaledb.db.queries import Queries

QUIET = Settings(compactor=None, garbage_collector=None, flush_interval_s=0.005)

PUBLIC_CLASSES = [
    shaledb.Db,
    shaledb.DbReader,
    shaledb.Snapshot,
    shaledb.ReaderSnapshot,
    shaledb.WriteBatch,
    shaledb.WriteHandle,
    shaledb.Transaction,
    shaledb.Scan,
    shaledb.aio.Db,
    shaledb.aio.DbReader,
    shaledb.aio.Snapshot,
    shaledb.aio.AsyncScan,
    shaledb.aio.AsyncChanges,
    shaledb.ChangeFeed,
]
DUNDERS = {"__getitem__", "__contains__", "__iter__", "__setitem__", "__delitem__", "__enter__", "__exit__"}
DUNDERS |= {"__aenter__", "__aexit__", "__aiter__", "__anext__", "__next__"}


def _public_functions() -> Iterator[tuple[str, Callable[..., object]]]:
    for cls in PUBLIC_CLASSES:
        for name in dir(cls):
            if name.startswith("_") and name not in DUNDERS:
                continue
            raw = inspect.getattr_static(cls, name)
            f = raw.fget if isinstance(raw, property) else getattr(raw, "__func__", raw)
            if inspect.isfunction(f):
                yield f"{cls.__module__}.{cls.__qualname__}.{name}", f
                for over in typing.get_overloads(f):
                    yield f"{cls.__module__}.{cls.__qualname__}.{name} (overload)", over
    for name in shaledb.admin.__all__:
        f = getattr(shaledb.admin, name)
        if inspect.isfunction(f):
            yield f"shaledb.admin.{name}", f


def _names() -> dict[str, object]:
    """Every class and alias of the package, to resolve names imported only for type checking."""
    out: dict[str, object] = {}
    for mod in list(sys.modules.values()):
        if mod is not None and mod.__name__.startswith("shaledb"):
            out.update(vars(mod))
    return out


def _any_in(t: object, names: dict[str, object], seen: set[int]) -> bool:
    if t is typing.Any:
        return True
    if id(t) in seen:
        return False
    seen.add(id(t))
    if typing.is_typeddict(t):  # ``**kwargs: Unpack[SomeOptions]``: its fields count too
        # (evaluated here: a TypedDict's forward references resolve in its own module only,
        # where names imported for type checking are missing)
        fields = [
            eval(v.__forward_arg__, names) if isinstance(v, typing.ForwardRef) else v
            for v in t.__annotations__.values()  # type: ignore[attr-defined]
        ]
        return any(_any_in(v, names, seen) for v in fields)
    return any(_any_in(a, names, seen) for a in typing.get_args(t))


def test_public_signatures_name_no_any() -> None:
    names = _names()
    found = []
    count = 0
    for name, f in _public_functions():
        count += 1
        own = inspect.unwrap(f).__globals__  # (a decorated function's, not its decorator's module)
        hints = typing.get_type_hints(f, globalns={**names, **own})
        found += [f"{name}: {p} is {t}" for p, t in hints.items() if _any_in(t, names, set())]
    assert count > 150, "the scan should see the whole public surface"
    assert not found, "\n".join(found)


def test_the_scan_sees_any() -> None:
    """The check above can fail: a signature with ``Any`` in it is found."""

    def f(a: int, b: dict[str, typing.Any]) -> list[int | None]:
        raise NotImplementedError

    hints = typing.get_type_hints(f)
    assert [p for p, t in hints.items() if _any_in(t, {}, set())] == ["b"]


def test_checkpoint_and_index_query_types_say_what_they_return() -> None:
    assert typing.get_type_hints(Db.create_checkpoint)["return"] is shaledb.Checkpoint
    rt = typing.get_type_hints(Db.index_query)["return"]
    assert set(typing.get_args(rt)) == {list[bytes], list[tuple[bytes, bytes]]}


# ------------------------------------------------------------------ bytes-like keys


def _like(b: bytes) -> list[bytes | bytearray | memoryview]:
    return [b, bytearray(b), memoryview(b), memoryview(b"__" + b + b"__")[2:-2]]


def test_bytes_like_keys_and_values_on_the_writer(tmp_path: Path) -> None:
    with Db.open(tmp_path / "db", settings=QUIET) as db:
        for i, kind in enumerate(_like(b"key")):
            db.put(kind, _like(b"value%d" % i)[i])
            assert db.get(b"key") == b"value%d" % i
            assert type(db.get(kind)) is bytes
            assert kind in db and db[kind] == b"value%d" % i
        db.put(bytearray(b"m"), b"v", metadata=memoryview(b"meta"), ttl=60)
        head = db.head(bytearray(b"m"))
        assert head is not None and head.metadata == b"meta"
        for kind in _like(b"key"):
            db.put(b"key", b"x")
            db.delete(kind)
            assert db.get(b"key") is None
        db.write(
            WriteBatch()
            .put(bytearray(b"b1"), memoryview(b"v1"))
            .put(memoryview(b"b2"), bytearray(b"v2"))
            .put(b"b3", b"v3")
            .put(b"b4", b"v4")
            .delete(memoryview(b"b3"))
        )
        db.delete_range(bytearray(b"b4"), memoryview(b"b5"))
        assert db.get_many([bytearray(b"b1"), memoryview(b"b2"), b"b3"]) == [b"v1", b"v2", None]
        for lo, hi in zip(_like(b"b"), _like(b"c")):
            assert list(db.scan(lo, hi)) == [(b"b1", b"v1"), (b"b2", b"v2")]
            assert list(db.scan(prefix=lo)) == [(b"b1", b"v1"), (b"b2", b"v2")]
            assert list(db.keys(lo, hi, reverse=True)) == [b"b2", b"b1"]
        db[bytearray(b"d")] = memoryview(b"dv")
        assert db[b"d"] == b"dv"
        del db[memoryview(b"d")]
        assert b"d" not in db
        keys = [k for k, _ in db.scan()]
        assert all(type(k) is bytes for k in keys)


def test_bytes_like_keys_on_snapshots_readers_and_transactions(tmp_path: Path) -> None:
    with Db.open(tmp_path / "db", settings=QUIET) as db:
        db.put(b"a", b"1")
        db.put(b"b", b"2")
        with db.snapshot() as snap:
            assert snap.get(bytearray(b"a")) == b"1" and snap[memoryview(b"b")] == b"2"
            assert list(snap.scan(bytearray(b"a"), memoryview(b"b"))) == [(b"a", b"1")]
        with db.transaction() as t:
            t.put(bytearray(b"c"), memoryview(b"3"))
            assert t.get(memoryview(b"c")) == b"3"
            assert t.get_many([bytearray(b"a"), b"c"]) == [b"1", b"3"]
            t.delete(bytearray(b"b"))
            assert list(t.scan(bytearray(b"a"))) == [(b"a", b"1"), (b"c", b"3")]
    with DbReader.open(tmp_path / "db") as r:
        assert r.get(bytearray(b"c")) == b"3" and r.get(memoryview(b"b")) is None
        assert list(r.scan(memoryview(b"a"), bytearray(b"b"))) == [(b"a", b"1")]
        with r.snapshot() as rs:
            assert rs.get_many([memoryview(b"a"), bytearray(b"c")]) == [b"1", b"3"]


def test_bytes_like_keys_on_aio(tmp_path: Path) -> None:
    async def main() -> None:
        async with await shaledb.aio.Db.open(str(tmp_path / "db"), settings=QUIET) as db:
            await db.put(bytearray(b"k"), memoryview(b"v"))
            await db.put(b"t", bytearray(b"w"), ttl=60)
            assert await db.get(memoryview(b"k")) == b"v"
            assert [kv async for kv in db.scan(bytearray(b"k"), memoryview(b"l"))] == [(b"k", b"v")]
            await db.delete(bytearray(b"k"))
            assert await db.get(b"k") is None

    asyncio.run(main())


def test_bad_keys_still_raise_invalid_argument(tmp_path: Path) -> None:
    with Db.open(tmp_path / "db", settings=QUIET) as db:
        for bad in ("text", 5, b"", bytearray()):
            with pytest.raises(InvalidArgument):
                db.put(bad, b"v")  # type: ignore[arg-type]
            with pytest.raises(InvalidArgument):
                db.get(bad)  # type: ignore[call-overload]
        with db.snapshot() as snap:
            with pytest.raises(InvalidArgument):
                snap.get(b"")
            with pytest.raises(InvalidArgument):
                snap.scan(limit=-1)  # a snapshot checks the limit as the writer does


def test_a_bad_range_delete_bound_is_named(tmp_path: Path) -> None:
    """``delete_range(b"a", "b")`` said "keys are bytes" without naming the argument; it is
    named as ``scan``'s are (``scan start must be bytes ...``), on every handle, and nothing
    is written."""
    with Db.open(tmp_path / "db", settings=QUIET) as db:
        db.put(b"a1", b"v")
        cases = [
            (
                (b"a", "b"),
                r"^delete_range end must be bytes, got str: encode text first, e\.g\. end\.encode\(\)$",
            ),
            (("a", b"b"), r"^delete_range start must be bytes, got str"),
            ((None, b"b"), r"^delete_range start must be bytes, got NoneType$"),
            ((b"a", 5), r"^delete_range end must be bytes, got int$"),
            ((b"", b"b"), r"^delete_range start: a key must not be empty$"),
            ((b"a", b"b" * 70000), r"^delete_range end: a key may be at most"),
        ]
        for args, message in cases:
            with pytest.raises(InvalidArgument, match=message):
                db.delete_range(*args)  # type: ignore[arg-type]
            with pytest.raises(InvalidArgument, match=message):
                WriteBatch().delete_range(*args)  # type: ignore[arg-type]
            with db.transaction() as txn, pytest.raises(InvalidArgument, match=message):
                txn.delete_range(*args)  # type: ignore[arg-type]
        assert db.get(b"a1") == b"v"


# ------------------------------------------------------------------ one query surface

READS = {
    "get",
    "get_many",
    "scan",
    "head",
    "index_query",
    "scan_heads",
    "fold_heads",
    "fold_keys",
    "fold_objects",
    "keys",
    "values",
    "items",
    "__getitem__",
    "__contains__",
    "__iter__",
}


def test_every_handle_answers_the_same_reads_from_one_place() -> None:
    for cls in (shaledb.Db, shaledb.Snapshot, shaledb.DbReader, shaledb.ReaderSnapshot):
        assert issubclass(cls, Queries)
        for name in READS:
            assert getattr(cls, name) is getattr(Queries, name), f"{cls.__name__}.{name} is its own copy"


def test_get_of_a_deleted_key_returns_the_default(tmp_path: Path) -> None:
    """A tombstone is an absent key: ``get(key, default)`` gives ``default``, on every handle."""
    with Db.open(tmp_path / "db", settings=QUIET) as db:
        db.put(b"k", b"v")
        db.delete(b"k")
        assert db.get(b"k", b"dflt") == b"dflt"
        with db.snapshot() as snap:
            assert snap.get(b"k", b"dflt") == b"dflt"
    with DbReader.open(tmp_path / "db") as r:
        assert r.get(b"k", b"dflt") == b"dflt"


def test_reader_and_its_snapshots_fold_like_the_writer(tmp_path: Path) -> None:
    with Db.open(tmp_path / "db", settings=QUIET) as db:
        for i in range(5):
            db.put(b"k%d" % i, b"v%d" % i, metadata=b"m")
        want_keys = list(db.fold_keys(b"k1", b"k4"))
        want_heads = [(k, h.value_size) for k, h in db.scan_heads(b"k1", b"k4")]
        want_objects = list(db.fold_objects(b"k1", b"k4"))
    assert want_keys == [b"k1", b"k2", b"k3"]
    with DbReader.open(tmp_path / "db") as r:
        assert list(r.fold_keys(b"k1", b"k4")) == want_keys
        assert [(k, h.value_size) for k, h in r.fold_heads(b"k1", b"k4")] == want_heads
        with r.snapshot() as rs:
            assert [(k, h.value_size) for k, h in rs.scan_heads(b"k1", b"k4")] == want_heads
            assert list(rs.fold_objects(b"k1", b"k4")) == want_objects
        rs2 = r.snapshot()
        rs2.close()
        with pytest.raises(shaledb.ClosedError, match="snapshot is closed"):
            rs2.fold_keys()


def test_every_error_the_docs_name_is_exported_at_the_top() -> None:
    """The README and the guides name errors as users catch them (``except shaledb.X``):
    every class of the error tree a user can meet is in ``shaledb.__all__``."""
    import re
    from pathlib import Path

    from shaledb import errors

    tree = {n for n, c in vars(errors).items() if isinstance(c, type) and issubclass(c, errors.ShaleError)}
    docs = Path(__file__).parents[2]
    text = "\n".join(p.read_text() for p in [docs / "README.md", *sorted((docs / "docs").glob("*.md"))])
    named = {n for n in re.findall(r"`([A-Z][A-Za-z]+)`", text) if n in tree}
    assert named, "no error named in the docs: the pattern is stale"
    missing = sorted(n for n in named if n not in shaledb.__all__)
    assert not missing, f"named in the docs but not exported from shaledb: {missing}"


@pytest.mark.parametrize(
    ("cls", "typo", "hint"),
    [
        (shaledb.Settings, "flush_interval", "flush_interval_s"),
        (shaledb.GcOptions, "min_age", "min_age_s"),
        (shaledb.CompactorOptions, "poll_interval", "poll_interval_s"),
        (shaledb.RetryOptions, "max_attempt", "max_attempts"),
        (shaledb.DbReaderOptions, "manifest_poll_interval", "manifest_poll_interval_s"),
        (shaledb.JournalOptions, "nothing_like_it", None),
    ],
)
def test_a_mistyped_option_keyword_names_the_closest(cls: type, typo: str, hint: str | None) -> None:
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{typo}'") as err:
        cls(**{typo: 1})
    assert (f"did you mean {hint}" in str(err.value)) if hint else ("did you mean" not in str(err.value))


def test_every_entry_point_that_takes_a_url_takes_a_path(tmp_path: Path) -> None:
    """``Db.open`` and ``DbReader.open`` were typed to take a ``pathlib.Path``; ``Compactor.open``,
    ``GarbageCollector.open``, ``verify``, the ``shaledb.admin`` functions and the asyncio
    handles' ``open`` took one at run time too but were typed ``str``, so a type checker
    refused ``Compactor.open(path)``."""
    from shaledb.admin.verify import verify

    path = tmp_path / "db"
    with Db.open(path, settings=QUIET) as db:
        db.put(b"k", b"v")
    cp = shaledb.admin.create_checkpoint(path, name="p")
    assert shaledb.admin.refresh_checkpoint(path, cp.id, lifetime=60).id == cp.id
    assert [c.id for c in shaledb.admin.list_checkpoints(path, name="p")] == [cp.id]
    assert shaledb.admin.delete_checkpoint(path, cp.id)
    assert shaledb.admin.read_manifest(path).id >= 1
    with shaledb.Compactor.open(path) as compactor:
        compactor.run_once()
    with shaledb.GarbageCollector.open(path) as gc:
        gc.run_once(dry_run=True)
    assert verify(path).ok
    shaledb.admin.collect_lifecycle(path)

    async def on_the_loop() -> None:
        async with await shaledb.aio.Db.open(path, settings=QUIET) as db:
            await db.put(b"a", b"1")
        async with await shaledb.aio.DbReader.open(path) as r:
            assert await r.get(b"a") == b"1"

    asyncio.run(on_the_loop())
    shaledb.admin.destroy(path, soft=True)
    with pytest.raises(shaledb.DatabaseDestroyed):
        Db.open(path, settings=QUIET)


def test_the_types_users_meet_are_importable_from_shaledb(tmp_path: Path) -> None:
    """The change feed's ``ChangeFeed``, ``Change`` and ``Cursor`` and ``collect_lifecycle``'s
    ``DestroyStatus`` were reachable only from internal modules (``shaledb.engine.changes``,
    ``shaledb.admin.destruction``): a user annotating a function over a feed had to import them."""
    for name in ("Change", "ChangeFeed", "Cursor", "DestroyStatus"):
        assert name in shaledb.__all__, name
    url = str(tmp_path / "db")
    with Db.open(url, settings=QUIET) as db:
        db.put(b"k", b"v")
        with db.changes(follow=False) as feed:
            assert type(feed) is shaledb.ChangeFeed
            change = next(iter(feed))
            assert type(change) is shaledb.Change and type(change.cursor) is shaledb.Cursor
            assert shaledb.Cursor.parse(str(change.cursor)) == change.cursor
    status = shaledb.admin.collect_lifecycle(url)
    assert type(status) is shaledb.DestroyStatus and status.state == "active"
