"""Streaming CLI output: rows are written as they are read, never gathered first.

``shaledb scan`` of a database of any size runs in constant memory: JSON lines
(``--jsonl``) are written one row per line, ``--json``'s array one element at a
time (the same text ``json.dump(rows, indent=2, sort_keys=True)`` would give), and
a human table takes its column widths from the first :data:`WIDTH_SAMPLE` rows (or first
:data:`SAMPLE_BYTES` of cells) only (later, wider cells
just push their line out). Every row is flushed to the pipe at once, so
``shaledb scan | head -1`` prints its line immediately; when the reader
closes the pipe, :func:`silence_stdout` lets the command end quietly with
exit 0, as ``head`` expects (see ``shaledb.cli.main``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

WIDTH_SAMPLE = 1000
"""Rows read ahead to size a human table's columns."""

SAMPLE_BYTES = 1 << 20
"""... or fewer, once their cells hold this many characters (large values)."""


def stream_rows(out: Any, rows: Iterable[dict[str, Any]], columns: Sequence[str]) -> int:
    """Write ``rows`` as a JSON array or a table on ``out.stream`` as they come; the row count."""
    if getattr(out, "as_jsonl", False):
        return _stream_lines(out.stream, rows)
    if out.as_json:
        return _stream_json(out.stream, rows)
    return _stream_table(out.stream, iter(rows), columns)


def _stream_json(stream: Any, rows: Iterable[dict[str, Any]]) -> int:
    n = 0
    for row in rows:
        text = json.dumps(row, indent=2, sort_keys=True, default=str).replace("\n", "\n  ")
        stream.write(("[\n  " if n == 0 else ",\n  ") + text)
        n += 1
        if n <= WIDTH_SAMPLE or n % 100 == 0:
            stream.flush()
    stream.write("[]\n" if n == 0 else "\n]\n")
    stream.flush()
    return n


def _stream_lines(stream: Any, rows: Iterable[dict[str, Any]]) -> int:
    """``--jsonl``: one compact object per line, so every prefix ``head`` keeps is valid."""
    n = 0
    for row in rows:
        stream.write(json.dumps(row, sort_keys=True, default=str) + "\n")
        n += 1
        if n <= WIDTH_SAMPLE or n % 100 == 0:
            stream.flush()
    stream.flush()
    return n


def _stream_table(stream: Any, rows: Iterator[dict[str, Any]], columns: Sequence[str]) -> int:
    from .output import _fmt

    head: list[dict[str, Any]] = []
    widths = [len(c) for c in columns]
    held = 0
    for r in rows:
        head.append(r)
        for i, c in enumerate(columns):
            cell = len(_fmt(r.get(c)))
            widths[i] = max(widths[i], cell)
            held += cell
        if len(head) >= WIDTH_SAMPLE or held >= SAMPLE_BYTES:
            break
    stream.write("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths)).rstrip() + "\n")
    n = 0
    for r in _chain(head, rows):
        stream.write("  ".join(_fmt(r.get(c)).ljust(w) for c, w in zip(columns, widths)).rstrip() + "\n")
        n += 1
        if n <= 100 or n % 100 == 0:
            stream.flush()  # the first lines reach `head` at once; later ones in chunks
    if n == 0:
        stream.write("(none)\n")
    stream.flush()
    return n


def follow_rows(out: Any, rows: Iterable[dict[str, Any]], columns: Sequence[str]) -> int:
    """Write ``rows`` one line each the moment each is read (a follower's output, which has no
    end to size a table or close an array by): JSON lines, or unpadded table lines under the
    column names. The row count."""
    from .output import _fmt

    stream = out.stream
    if not out.as_json:
        stream.write("  ".join(c.upper() for c in columns) + "\n")
        stream.flush()
    n = 0
    for row in rows:
        if out.as_json:
            stream.write(json.dumps(row, sort_keys=True, default=str) + "\n")
        else:
            stream.write("  ".join(_fmt(row.get(c)) for c in columns) + "\n")
        stream.flush()
        n += 1
    return n


def _chain(head: list[dict[str, Any]], rest: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The sampled rows (released as they are written), then the rest."""
    head.reverse()
    while head:
        yield head.pop()
    yield from rest


def silence_stdout() -> None:
    """Point stdout at /dev/null after its reader went away (EPIPE).

    Python flushes stdout again at exit; without this that flush raises a
    second BrokenPipeError and prints "Exception ignored ..." on stderr.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass  # stdout without a file descriptor (a test's StringIO): nothing to silence
