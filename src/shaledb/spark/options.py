"""Every option the "shaledb" data source knows, in one table, and the check of option names.

Spark passes options as strings and never says which ones a source used, so
a misspelled name (``keycol`` for ``key``, ``prefx`` for ``prefix``) would
silently fall back to a default: a write keyed by the wrong column, a read of
every row. :func:`check_names` refuses any name not in :data:`OPTIONS`,
naming the closest known one. docs/spark.md lists the same table (a test
keeps the two equal).

Besides the table: ``path`` (the URL), ``store.<name>`` (passed to
``open_store``), and the keys Spark's session catalog adds to a table's
options when it creates one (``location``, ``owner``, ``provider``,
``option.<name>``, ...), which carry nothing for the source.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import InvalidArgument


@dataclass(frozen=True)
class OptionSpec:
    """One option: its name, whether reads and/or writes take it, its default and meaning."""

    name: str
    read: bool
    write: bool
    default: str
    meaning: str


def _r(name: str, default: str, meaning: str) -> OptionSpec:
    return OptionSpec(name, True, False, default, meaning)


def _w(name: str, default: str, meaning: str) -> OptionSpec:
    return OptionSpec(name, False, True, default, meaning)


OPTIONS: tuple[OptionSpec, ...] = (
    # writes
    _w("key", "key", "key column, binary or string"),
    _w("value", "value if present", "value column, binary or string"),
    _w("value_columns", "every other column", "these columns are the value, one JSON object per row"),
    _w("metadata", "none", "binary or string column stored as the entry's metadata"),
    _w("index_columns", "none", "comma-separated columns holding each row's secondary index terms"),
    _w(
        "value_separation_threshold", "none", "values of at least this many bytes go to value-journal objects"
    ),
    _w("ingest_id", "a fresh UUID", "makes re-runs no-ops"),
    _w("ingest_behind", "false", "load as older than everything"),
    _w("save_mode", "append", "errorifexists, ignore, append or overwrite (Spark's mode for .save())"),
    _w("on_duplicate", "error", "error, last or first: a key given more than once in one ingest"),
    _w("duplicates", "error", "older name of on_duplicate"),
    _w("order_by", "none", "comma-separated columns deciding last/first among duplicates"),
    _w("max_sst_size_bytes", "64 MiB", "output SST size"),
    _w("block_size_bytes", "Settings()", "SST block size"),
    _w("compression", "Settings()", "none, lz4 or zstd"),
    _w("bloom_bits_per_key", "Settings()", "bloom filter bits per key (0: none)"),
    _w("lease_s", "3600", "GC lease of the job, seconds"),
    _w("keep_page_cache", "false", "leave the SSTs a task writes in the OS page cache"),
    _w("compact", "streams: true", "a stream's commit compacts when sorted runs pile up (streams only)"),
    _w("testing.fail_partition", "", "test hook: that partition's first attempt fails"),
    _w("testing.duplicate_attempt", "false", "test hook: each task also leaves a losing attempt's SSTs"),
    # reads
    _r("checkpoint", "a new one", "read this checkpoint (id or name)"),
    _r("version", "the latest", "read this manifest id, which a checkpoint must pin"),
    _r("checkpoint_lifetime_s", "3600", "lifetime of a checkpoint the read creates (none: never expires)"),
    _r("partitions", "by size", "number of key ranges (at most)"),
    _r("key_type", "binary", "binary or string"),
    _r("value_type", "binary", "binary or string"),
    _r(
        "pushdown",
        "false",
        "true: key filters are applied by the source (see the caveat); not for SQL tables",
    ),
    _r("start", "", "read keys from this one on (text, or 0x hex for binary keys)"),
    _r("end", "", "read keys before this one"),
    _r("prefix", "", "read keys with this prefix"),
)
"""The options table (docs/spark.md has the same rows)."""

KNOWN: frozenset[str] = frozenset(o.name for o in OPTIONS)

CATALOG_KEYS = frozenset(
    {"location", "owner", "provider", "comment", "external", "is_managed_location", "collation"}
)
"""Keys Spark's session catalog adds to a table's options (CREATE TABLE ... USING)."""


_TIME_TRAVEL = (
    "shaledb reads an older version through a checkpoint: option checkpoint (its UUID or name), or "
    "option version (a manifest version a live checkpoint pins); there is no time travel by "
    "timestamp (docs/spark.md, Checkpoint reads)"
)
_NO_SCHEMA = (
    "a shaledb database has no table schema to merge or replace: it stores a key and a value per "
    "row (without a value column, option value_columns makes the value a JSON object of columns)"
)
FOREIGN = {
    "versionasof": _TIME_TRAVEL,
    "timestampasof": _TIME_TRAVEL,
    "snapshot-id": _TIME_TRAVEL,
    "scan.snapshot-id": _TIME_TRAVEL,
    "scan.timestamp-millis": _TIME_TRAVEL,
    "as-of-timestamp": _TIME_TRAVEL,
    "mergeschema": _NO_SCHEMA,
    "overwriteschema": _NO_SCHEMA,
    "replacewhere": (
        "shaledb has no partial overwrite: mode overwrite replaces the whole contents, and an append "
        "replaces the values of the keys it writes (delete keys with a writer, shaledb.Db)"
    ),
}
"""Options of other table formats (Delta Lake, Paimon, Iceberg) a user may try, and what
shaledb does instead: refused with that, not with a list of every option."""


def check_names(names: Iterable[str]) -> None:
    """Refuse any option name the source does not know, naming the closest known one."""
    for raw in names:
        name = raw.lower()
        if name == "path" or name in KNOWN or name.startswith("store.") or name in CATALOG_KEYS:
            continue
        if name.startswith("option."):  # the catalog's copy of a table option, checked as itself
            continue
        if name == "paths":  # what Spark passes for load([url, ...]) or load(a, b)
            raise InvalidArgument(
                "a shaledb read or write takes one database URL: load(url) / save(url), not a list "
                "(read each database with its own load() and union the DataFrames)"
            )
        if name in FOREIGN:
            raise InvalidArgument(f"{raw!r} is not a shaledb option: {FOREIGN[name]}")
        raise InvalidArgument(
            f"unknown shaledb option {raw!r}{closest(name, KNOWN)} "
            f"(known: {', '.join(sorted(KNOWN))}, path, store.<name>)"
        )


def closest(name: str, known: Iterable[str]) -> str:
    """ "; did you mean 'x'?" naming the known option spelled closest to ``name`` (compared in
    lower case, named as spelled in ``known``), or "" when none is close."""
    spelled = {k.lower(): k for k in known}
    close = difflib.get_close_matches(name.lower(), sorted(spelled), n=1, cutoff=0.5)
    return f"; did you mean {spelled[close[0]]!r}?" if close else ""


__all__ = ["CATALOG_KEYS", "FOREIGN", "KNOWN", "OPTIONS", "OptionSpec", "check_names", "closest"]
