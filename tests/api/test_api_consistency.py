"""Item 7 of issue 28: half-open ranges everywhere, documented option names, durations as text."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from shaledb import Db, DbReader, DbReaderOptions, InvalidArgument, Settings, TransactionConflict
from shaledb.engine.indexes import term_range
from shaledb.settings import CompactorOptions, GcOptions, RetryOptions

QUIET = Settings(compactor=None, garbage_collector=None, flush_interval_s=0.005)


def test_index_query_end_is_exclusive_like_scan(tmp_path: Path) -> None:
    with Db.open(tmp_path / "db", settings=QUIET) as db:
        for k, t in ((b"a", b"LA"), (b"b", b"LAX"), (b"c", b"SEA"), (b"d", b"SFO")):
            db.put(k, b"v", indexes={"dest": [t]})
        db.put(b"e", b"v", indexes={"dest": [b"LAX\x00x"]})
        assert db.index_query("dest", b"LAX", b"SEA") == [b"b", b"e"]  # SEA excluded
        assert db.index_query("dest", None, b"LAX") == [b"a"]
        assert db.index_query("dest", *term_range(b"LAX")) == [b"b"]
        assert list(db.keys(b"b", b"d")) == [b"b", b"c"]  # the same convention as scan
        with db.snapshot() as s:
            assert s.index_query("dest", b"SEA", b"SFO") == [b"c"]
    with DbReader.open(tmp_path / "db") as r:
        assert r.index_query("dest", b"LA", b"LAX") == [b"a"]


def test_documented_option_names_and_old_spellings(tmp_path: Path) -> None:
    with Db.open(tmp_path / "db", settings=QUIET) as db:
        db.put(b"k", b"v")
    with DbReader.open(tmp_path / "db", manifest_poll_interval_s=0.5, checkpoint_lifetime_s="1min") as r:
        assert r.options.manifest_poll_interval_s == 0.5 and r.options.checkpoint_lifetime_s == 60.0
    with (
        pytest.warns(DeprecationWarning, match="manifest_poll_interval_s"),
        DbReader.open(tmp_path / "db", manifest_poll_interval=2, checkpoint_lifetime_s=None) as r,
    ):
        assert r.options.manifest_poll_interval_s == 2.0 and r.options.checkpoint_lifetime_s is None
    with pytest.raises(InvalidArgument, match="give manifest_poll_interval_s only"):
        DbReader.open(tmp_path / "db", manifest_poll_interval=2, manifest_poll_interval_s=2)


def test_durations_as_strings_or_timedelta_everywhere(tmp_path: Path) -> None:
    assert Settings(flush_interval_s="250ms").flush_interval_s == 0.25
    assert DbReaderOptions(manifest_poll_interval_s=dt.timedelta(seconds=3)).manifest_poll_interval_s == 3.0
    assert GcOptions(min_age_s="1h").min_age_s == 3600.0
    assert CompactorOptions(poll_interval_s="2s").poll_interval_s == 2.0
    assert RetryOptions(timeout_s="1min").timeout_s == 60.0
    with pytest.raises(InvalidArgument, match="flush_interval_s"):
        Settings(flush_interval_s="soon")
    with Db.open(tmp_path / "db", settings=QUIET) as db:
        db.put(b"k", b"v", ttl="1h")
        db.put(b"gone", b"v", ttl=dt.timedelta(milliseconds=1))
        h = db.head(b"k")
        assert h is not None and h.expires_at is not None
        with pytest.raises(InvalidArgument, match="duration"):
            db.put(b"k", b"v", ttl="an hour or so")


TYPED_USER_CODE = """
import datetime as dt
from shaledb import DbReaderOptions, Settings
from shaledb.settings import CompactorOptions, GcOptions, RetryOptions
s = Settings(flush_interval_s="250ms", history_retention_s=dt.timedelta(hours=1))
r = DbReaderOptions(checkpoint_lifetime_s="10min", manifest_poll_interval_s=0.5)
g = GcOptions(min_age_s=dt.timedelta(minutes=5), interval_s=30)
c = CompactorOptions(poll_interval_s="2s", job_lease_s=dt.timedelta(minutes=10))
t = RetryOptions(timeout_s="1min")
seconds: float = s.flush_interval_s + g.min_age_s + c.job_lease_s + t.timeout_s
lifetime: float | None = r.checkpoint_lifetime_s
"""


def test_duration_fields_type_check_with_text_and_timedelta(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mypy --strict accepts a user's "1h" or timedelta for a duration field and
    reads it back as float (before: the fields were typed float, so both were errors)."""
    api = pytest.importorskip("mypy.api")
    import shaledb

    user = tmp_path / "user_code.py"
    user.write_text(TYPED_USER_CODE)
    monkeypatch.setenv("MYPYPATH", str(Path(shaledb.__file__).parents[1]))  # the shaledb under test
    out, err, status = api.run(
        ["--strict", "--no-incremental", "--cache-dir", str(tmp_path / "c"), str(user)]
    )
    assert status == 0, out + err


def test_wait_durable_takes_durations_like_every_other_timeout(tmp_path: Path) -> None:
    """``wait_durable("1s")`` raised a TypeError from inside the WAL, and NaN or -1 passed."""
    with Db.open(tmp_path / "db") as db:
        h = db.put(b"a", b"1", durable=False)
        assert h.wait_durable("1s") and h.wait_durable(dt.timedelta(seconds=1)) and h.wait_durable(2)
        for bad in (float("nan"), -1, "soon", [1]):
            with pytest.raises(InvalidArgument):
                h.wait_durable(bad)  # type: ignore[arg-type]


def test_the_open_functions_document_every_argument() -> None:
    """``help(shaledb.open)`` is where a new user looks first: it said only that the open
    fences an older writer and refuses nested roots, nothing of the URL forms, the options
    or the errors. Each argument of the public open functions is named in the docstring."""
    import inspect

    import shaledb

    for fn in (shaledb.open, Db.open):
        doc = inspect.getdoc(fn) or ""
        assert "Raises:" in doc and "s3://" in doc
        for name in inspect.signature(fn).parameters:
            assert f"{name}:" in doc, (fn, name)


def test_transaction_get_takes_a_default_as_the_handles_get_does(tmp_path: Path) -> None:
    """``txn.get(k, default)`` raised TypeError though ``Db.get``/``Snapshot.get`` take one.
    The default stands for every way a key is absent in the transaction (never written, its
    own delete, its own range delete), and a serializable read with a default is still a read."""
    with Db.open(tmp_path / "db", settings=QUIET) as db:
        db.put(b"a", b"1")
        db.put(b"b", b"2")
        db.put(b"c", b"3")
        with db.transaction(isolation="serializable") as txn:
            txn.put(b"x", b"own")
            txn.delete(b"a")
            txn.delete_range(b"c", b"d")
            got = [txn.get(k, b"-") for k in (b"a", b"b", b"c", b"x", b"absent")]
            assert got == [b"-", b"2", b"-", b"own", b"-"]
            assert txn.get(b"absent") is None and txn.get(b"absent", 0) == 0
            assert txn.get_many([b"a", b"b"]) == [None, b"2"]
            db.put(b"absent", b"now")  # written after the read with a default: a conflict
            with pytest.raises(TransactionConflict):
                txn.commit()
