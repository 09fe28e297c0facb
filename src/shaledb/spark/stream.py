"""The change feed as a Spark Structured Streaming source (offsets are change-feed cursors).

    stream = shaledb.spark.read_changes(spark, url)    # or, by hand:
    stream = (spark.readStream.format("shaledb")
              .schema(shaledb.spark.stream.CHANGES_SCHEMA)  # the change rows, not a checkpoint's
              .load(url))

PySpark's Python streaming data source API (``DataSourceStreamReader``) fits
the feed as it is: an offset is a JSON-able dict, here ``{"cursor": "c1..."}``
(``shaledb.engine.changes.Cursor``), so Spark's offset log stores the position a
restarted query resumes from, and a micro-batch is the changes between two
cursors, which any task can reread from the WAL objects. ``latestOffset``
reads forward from the start cursor (at most ``maxChangesPerTrigger``
changes, default 100,000) to find the end; ``read`` rereads exactly the
changes in ``(start, end]`` -- by sequence number and place in the batch, so
the micro-batch is the same however often it runs (Spark's exactly-once
contract with a replayable source).

The schema must be given: ``DataSource.schema()`` cannot tell a stream from
a batch read, and a batch read's schema is the checkpoint's key and value.
Offsets start at the oldest change the WAL still holds, as a real position
(``oldest_cursor``; option ``startingCursor``: a stored cursor, or "latest" for
new writes only); a cursor the garbage collector overtook fails the query with
``CursorExpired`` naming the offset and the way out (keep WAL objects with
``GcOptions.wal_retention_s``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from .extra import extra_error

try:
    from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
    from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType
except ImportError as exc:  # without the spark extra: name it and how to install it
    raise extra_error(exc) from None

from ..engine.changes import Change, Cursor, latest_cursor, oldest_cursor, open_changes
from ..errors import CursorExpired, InvalidArgument
from .options import closest
from .schema import int_option
from .tracebacks import short_traceback

CHANGES_SCHEMA = StructType(
    [
        StructField("seq", LongType(), False),
        StructField("batch_index", IntegerType(), False),
        StructField("batch_size", IntegerType(), False),
        StructField("kind", StringType(), False),
        StructField("key", BinaryType(), False),
        StructField("value", BinaryType(), True),
        StructField("metadata", BinaryType(), True),
        StructField("cursor", StringType(), False),
        StructField("end", BinaryType(), True),
        StructField("expires_at_ms", LongType(), True),
    ]
)
"""Columns of the change stream: one row per committed write (``shaledb.engine.changes.Change``).
``kind`` is "put", "delete", "merge" (``value``: the operand) or "delete_range" (every key in
``[key, end)``); ``expires_at_ms`` is a put's expiry (``ttl``), else null."""

MAX_CHANGES_PER_TRIGGER = 100_000

STREAM_OPTIONS = ("maxChangesPerTrigger", "startingCursor")
"""The options a change stream takes besides ``path`` and ``store.<name>``."""


def check_stream_names(names: Iterable[str]) -> None:
    """Refuse an unknown stream option: a misspelled ``startingCursor`` would silently replay
    the whole feed, a misspelled ``maxChangesPerTrigger`` silently use the default."""
    known = {n.lower() for n in STREAM_OPTIONS}
    for raw in names:
        name = str(raw).lower()
        if name in known or name in ("path", "url") or name.startswith("store."):
            continue
        raise InvalidArgument(
            f"unknown shaledb stream option {raw!r}{closest(name, STREAM_OPTIONS)} "
            f"(known: {', '.join(STREAM_OPTIONS)}, path, store.<name>)"
        )


def _row(c: Change) -> tuple[Any, ...]:
    return (
        c.seq,
        c.batch_index,
        c.batch_size,
        c.kind,
        c.key,
        c.value,
        c.metadata,
        str(c.cursor),
        c.end,
        c.expires_at_ms,
    )


def _store_options(options: Mapping[str, str]) -> dict[str, Any]:
    return {k[len("store.") :]: v for k, v in options.items() if k.startswith("store.")}


def _require_database(url: str, store_options: dict[str, Any]) -> None:
    """Refuse a stream of a database that does not exist when the query starts (one manifest
    read), not at its first micro-batch."""
    from .. import admin

    admin.read_manifest(url, store_options=store_options or None)


@contextmanager
def _expired_says_how(offset: str) -> Iterator[None]:
    """A stream whose offset the collector overtook (stopped while the WAL it needs reached
    SSTs and was collected) fails, never skips; this names the way out in Spark's terms: the
    feed's own message speaks of cursors, and the stored offset is the query's."""
    try:
        yield
    except CursorExpired as exc:
        raise CursorExpired(
            f"this stream's offset {offset} (where its checkpointLocation stopped, or its startingCursor) "
            f"cannot be resumed: {exc}. "
            "The changes since it are in the database but no longer in its change feed: take them "
            "from a snapshot (spark.read.format('shaledb').load(url)), then start the query with a new "
            "checkpointLocation (it begins at the oldest change the WAL still holds; option "
            "startingCursor=latest for new writes only)"
        ) from exc


class ChangeRange(InputPartition):  # type: ignore[misc]
    """One micro-batch: the changes after ``start`` up to and including ``end``."""

    def __init__(self, start: str, end: str) -> None:
        super().__init__(None)
        self.start = start
        self.end = end


class ShaleChangeStream(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    """The stream reader (see the module docstring)."""

    @short_traceback
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        if [f.name for f in schema.fields] != [f.name for f in CHANGES_SCHEMA.fields]:
            raise InvalidArgument(
                "a shaledb stream reads the change feed: give .schema(shaledb.spark.stream.CHANGES_SCHEMA) "
                f"(columns {[f.name for f in CHANGES_SCHEMA.fields]}), got {[f.name for f in schema.fields]}"
            )
        url = options.get("path") or options.get("url")
        if not url:
            raise InvalidArgument("give the database URL: .load(url)")
        check_stream_names(options)
        self.url = url
        self.store_options = _store_options(options)
        self._target: Cursor | None = None
        self.max_changes = int_option(options, "maxChangesPerTrigger", MAX_CHANGES_PER_TRIGGER) or 1
        self.starting = options.get("startingCursor")
        if self.starting not in (None, "latest"):
            Cursor.parse(self.starting)
        _require_database(self.url, self.store_options)

    @short_traceback
    def initialOffset(self) -> dict[str, str]:
        """Where a new query starts: ``startingCursor``, the end ("latest"), or by default the
        oldest change the WAL still holds, as a real position. Spark stores this offset as the
        first micro-batch's start, so it must be one a feed can resume from: before, it was
        ``c1.1.0.0``, which raised CursorExpired once the collector had run."""
        if self.starting is not None and self.starting != "latest":
            return {"cursor": str(Cursor.parse(self.starting))}
        with open_changes(self.url, store_options=self.store_options, follow=False) as feed:
            at = latest_cursor(feed.store) if self.starting == "latest" else oldest_cursor(feed.store)
            return {"cursor": str(at)}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_changes)

    @short_traceback
    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: stop at the last change committed now."""
        with open_changes(self.url, store_options=self.store_options, follow=False) as feed:
            self._target = latest_cursor(feed.store)

    @short_traceback
    def latestOffset(self, start: dict[str, str], limit: Any = None) -> dict[str, str]:
        """The cursor of the last change within ``limit`` (and the AvailableNow target), or
        ``start`` when there is none: the offset moves only with changes."""
        most = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        if limit is not None and not isinstance(limit, (ReadMaxRows, ReadAllAvailable)):
            most = self.max_changes
        target = self._target
        last: Cursor | None = None
        taken = 0
        with (
            _expired_says_how(start["cursor"]),
            open_changes(self.url, start["cursor"], store_options=self.store_options, follow=False) as feed,
        ):
            while most is None or taken < most:
                changes = feed.read(1000 if most is None else min(1000, most - taken))
                if not changes:
                    break
                for c in changes:
                    if target is not None and (c.cursor.seq, c.cursor.taken) > (target.seq, target.taken):
                        return {"cursor": str(last)} if last is not None else start
                    last = c.cursor
                taken += len(changes)
        return {"cursor": str(last)} if last is not None else start

    def partitions(self, start: dict[str, str], end: dict[str, str]) -> list[InputPartition]:
        return [ChangeRange(start["cursor"], end["cursor"])]

    @short_traceback
    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, ChangeRange)
        end = Cursor.parse(partition.end)
        bound = (end.seq, end.taken)
        with (
            _expired_says_how(partition.start),
            open_changes(self.url, partition.start, store_options=self.store_options, follow=False) as feed,
        ):
            while True:
                changes = feed.read(1000)
                for c in changes:
                    if (c.cursor.seq, c.cursor.taken) > bound:
                        return
                    yield _row(c)
                if not changes or feed.cursor.wal_id > end.wal_id:
                    return

    def commit(self, end: dict[str, str]) -> None:
        """Nothing to release: retention is the collector's ``wal_retention_s``."""


__all__ = ["CHANGES_SCHEMA", "ChangeRange", "ShaleChangeStream"]
