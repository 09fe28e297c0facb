"""Property-based fuzzing of every option class and of the CLI's arguments (issue 26, item 2):
each input is a typed error (InvalidArgument, or another ShaleError from the call; for the
CLI a usage / not-found / error exit with a one-line typed message) or a working call --
never an untyped exception, a traceback, a hang or a silently accepted NaN.

The seed is printed with any failure (``conftest.py``); ``SHALEDB_TEST_SEED`` replays it.
"""

from __future__ import annotations

import dataclasses
import math
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from edges_kit import fuzz
from hypothesis import given
from hypothesis import strategies as st

from shaledb import Db, DbReader, Settings, errors
from shaledb.admin.gc import GarbageCollector
from shaledb.cli import main
from shaledb.cli.app import build_parser
from shaledb.compaction import Compactor
from shaledb.errors import InvalidArgument, ShaleError
from shaledb.settings import CompactorOptions, DbReaderOptions, GcOptions, JournalOptions, RetryOptions
from shaledb.store import drop_memory_store

OPTION_CLASSES = [Settings, RetryOptions, GcOptions, CompactorOptions, JournalOptions, DbReaderOptions]

WEIRD = [0, 1, -1, 2, 2**31, 2**63 - 1, 2**63, 2**64, -(2**63), 10**400]
WEIRD += [0.0, -0.0, 1e-300, 5e-324, 0.5, 1e9, 1e300, math.nan, math.inf, -math.inf]
WEIRD += [True, False, None, "", "1", "nan", b"1", [], {}, object()]

ANY = st.one_of(
    st.sampled_from(WEIRD),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(0, 5000),
    st.floats(0, 5000),
    st.text(max_size=6),
)


def _numbers_finite(obj: Any) -> None:
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if dataclasses.is_dataclass(v):
            _numbers_finite(v)
        elif isinstance(v, float):
            assert math.isfinite(v), f"{type(obj).__name__}.{f.name} accepted {v!r}"


@pytest.mark.parametrize("cls", OPTION_CLASSES, ids=lambda c: c.__name__)
@fuzz(150, deadline_s=1.0)
@given(data=st.data())
def test_option_constructors_give_a_typed_error_or_finite_options(cls: type, data: st.DataObject) -> None:
    names = [f.name for f in dataclasses.fields(cls)]
    chosen = data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=4, unique=True))
    kwargs = {n: data.draw(ANY, label=n) for n in chosen}
    try:
        obj = cls(**kwargs)
    except InvalidArgument:
        return
    _numbers_finite(obj)


@fuzz(200, deadline_s=1.0)
@given(data=st.data())
def test_settings_from_dict_gives_a_typed_error_or_settings(data: st.DataObject) -> None:
    keys = st.one_of(st.sampled_from([f.name for f in dataclasses.fields(Settings)]), st.text(max_size=4))
    nested = st.dictionaries(
        st.one_of(
            st.sampled_from(["max_attempts", "min_age_s", "bogus"]), st.integers(), st.text(max_size=3)
        ),
        ANY,
    )
    raw = data.draw(st.one_of(st.dictionaries(keys, st.one_of(ANY, nested), max_size=4), ANY))
    try:
        s = Settings.from_dict(raw)
    except InvalidArgument:
        return
    _numbers_finite(s)


# ---------------------------------------------------------------- working calls


@pytest.fixture
def mem_db() -> Iterator[str]:
    """A small memory database (two L0 SSTs and some WAL) shared by one test's examples."""
    name = f"fuzz-{uuid.uuid4().hex}"
    url = f"memory://{name}"
    with Db.open(url, settings=Settings(compactor=None, garbage_collector=None)) as db:
        for i in range(2):
            db.put(b"k%d" % i, b"v%d" % i, durable=True)
            db.flush(memtable=True)
        db.put(b"w", b"wal", durable=True)
    yield url
    drop_memory_store(name)


def small(name: str) -> st.SearchStrategy[Any]:
    """Values near each option's useful range (so many examples build valid options and run),
    mixed with anything at all."""
    if name.endswith("_s"):
        good: st.SearchStrategy[Any] = st.floats(0.001, 5.0)
    elif name.endswith("_bytes"):
        good = st.integers(4096, 1 << 22)
    elif name.endswith("_pct"):
        good = st.floats(0, 100)
    else:
        good = st.integers(1, 20)
    return st.one_of(good, good, good, ANY)


def draw_options(data: st.DataObject, cls: type, skip: tuple[str, ...] = ()) -> Any:
    fields = [
        f.name
        for f in dataclasses.fields(cls)
        if f.name not in skip and f.type not in ("RetryOptions", "JournalOptions", "bool", "str | None")
    ]
    chosen = data.draw(st.lists(st.sampled_from(fields), max_size=3, unique=True))
    kwargs = {n: data.draw(small(n), label=n) for n in chosen}
    try:
        return cls(**kwargs)
    except InvalidArgument:
        return None


@fuzz(25, deadline_s=20.0)
@given(data=st.data())
def test_valid_settings_give_a_working_writer(mem_db: str, data: st.DataObject) -> None:
    s = draw_options(data, Settings, skip=("compactor", "garbage_collector"))
    if s is None:
        return
    s = s.replace(compactor=None, garbage_collector=None, retry=RetryOptions(timeout_s=10.0))
    try:
        with Db.open(mem_db, settings=s) as db:
            db.put(b"x", b"y", durable=True)
            assert db.get(b"x") == b"y"
            assert db.get(b"k1") == b"v1"
    except ShaleError:
        pass  # a typed error (e.g. the database's compression differs) is an answer too


@fuzz(25, deadline_s=20.0)
@given(data=st.data())
def test_valid_reader_options_give_a_working_reader(mem_db: str, data: st.DataObject) -> None:
    o = draw_options(data, DbReaderOptions)
    if o is None:
        return
    o = dataclasses.replace(o, background_poll=False)
    with DbReader.open(mem_db, options=o) as r:
        assert r.get(b"k0") == b"v0"
        assert r.get(b"w") == b"wal"
        r.refresh()


@fuzz(25, deadline_s=20.0)
@given(data=st.data())
def test_valid_gc_and_compactor_options_give_working_passes(mem_db: str, data: st.DataObject) -> None:
    g = draw_options(data, GcOptions)
    if g is not None:
        with GarbageCollector.open(mem_db, g) as gc:
            gc.run_once()
    c = draw_options(data, CompactorOptions)
    if c is not None:
        with Compactor.open(mem_db, c) as comp:
            comp.run_once()
    j = draw_options(data, JournalOptions, skip=("recovery_strategy",))
    if j is not None:
        with Db.open(mem_db, settings=Settings(compactor=None, garbage_collector=None, journal=j)) as db:
            assert db.get(b"k1") == b"v1"
    with Db.open(mem_db, settings=Settings(compactor=None, garbage_collector=None)) as db:
        assert [db.get(b"k0"), db.get(b"k1"), db.get(b"w")] == [b"v0", b"v1", b"wal"]


# ---------------------------------------------------------------------- CLI

TEXT_ARGS = st.one_of(
    st.sampled_from(["nan", "inf", "-inf", "-5", "0", "-0", "1e308", "1e400", "9" * 30, "0x10", "1_0"]),
    st.sampled_from(["", " ", "--", "-", "1h", "-1h", "7days 30min", "1e9y", "250ms", "abc", "\x00", "é"]),
    st.integers(-(10**20), 10**20).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=8),
)
SMALL_COUNT = st.one_of(st.integers(-(10**20), 0).map(str), st.integers(1, 200).map(str), TEXT_ARGS)

# Every command, with what it needs to run once and end (run-* loop without --once).
COMMANDS: dict[str, list[str]] = {
    "read-manifest": [],
    "list-manifests": [],
    "put": ["k", "v"],
    "run-compactor": ["--once"],
    "run-gc": ["--once"],
    "create-checkpoint": [],
    "refresh-checkpoint": [],
    "delete-checkpoint": [],
    "list-checkpoints": [],
    "clone": [],
    "destroy": [],
    "get": ["k0"],
    "scan": [],
    "changes": [],  # without --follow (no value: never drawn) it lists and ends
    "compact-journal": [],
    "rebuild-ledger": [],
    "backup": [],
    "head": ["k0"],
    "index-query": ["f"],
    "verify": [],
    "bench": ["--keys=50"],
    "delete": ["k0"],
    "delete-range": ["k0", "k1"],
    "settings": [],
    "stats": [],  # its default (100,000 keys) is a long run, not an edge
}
BOUNDED = {("bench", "--keys"), ("bench", "--batch"), ("bench", "--value-size")}


def _value_options() -> dict[str, list[str]]:
    """Each command's options that take a value, read from the parser itself."""
    import argparse

    out: dict[str, list[str]] = {}
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out[name] = [
                    a.option_strings[-1] for a in sub._actions if a.option_strings and a.nargs != 0
                ] + [a.dest for a in sub._actions if not a.option_strings]
    return out


VALUE_OPTIONS = _value_options()
_ERROR_NAMES = set(errors.__all__)
_ERROR_LINE = re.compile(r"^shaledb: error: (\w+): ", re.MULTILINE)


def test_every_cli_command_is_fuzzed() -> None:
    assert set(VALUE_OPTIONS) == set(COMMANDS)


@fuzz(60, deadline_s=120.0)
@given(data=st.data())
def test_cli_arguments_give_a_typed_error_or_a_working_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], data: st.DataObject
) -> None:
    monkeypatch.chdir(tmp_path)  # relative paths a fuzzed argument names land here
    name = f"fuzzcli-{uuid.uuid4().hex}"
    url = f"memory://{name}"
    with Db.open(url, settings=Settings(compactor=None, garbage_collector=None)) as db:
        db.put(b"k0", b"v0", durable=True)
        db.flush(memtable=True)
    command = data.draw(st.sampled_from(sorted(COMMANDS)), label="command")
    argv = ["--path", url, command, *COMMANDS[command]]
    positional = {o for o in VALUE_OPTIONS[command] if not o.startswith("-")}
    options = VALUE_OPTIONS[command]
    chosen = data.draw(st.lists(st.sampled_from(options), unique=True, max_size=4)) if options else []
    for opt in chosen:
        value = data.draw(SMALL_COUNT if (command, opt) in BOUNDED else TEXT_ARGS, label=opt)
        if opt in positional:
            argv.append(value)
        else:
            argv.append(f"{opt}={value}")
    parsed = True
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse's usage error
        rc, parsed = exc.code, False
        assert rc == 2, (argv, rc)
    finally:
        drop_memory_store(name)
    err = capsys.readouterr().err
    assert "Traceback" not in err, (argv, err)
    assert rc in (0, 1, 2, 3), (argv, rc, err)
    if parsed and rc != 0:
        found = _ERROR_LINE.findall(err)
        assert found and all(n in _ERROR_NAMES for n in found), (argv, err)
