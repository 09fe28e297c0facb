"""What every ``shaledb`` command shares: the command registry, the output (a human
table or JSON, a progress line on a terminal), byte and size formatting, exit codes."""

from __future__ import annotations

import argparse
import json
import sys
import time
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..errors import InvalidArgument
from ..numbers import human_size

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_FENCED = 4
"""``run-compactor`` stopped because another compactor took the role over (a supervisor
may tell it from a crash: restarting it then only makes it stand by)."""

Handler = Callable[[argparse.Namespace, "Output"], int | None]
COMMANDS: list[tuple[str, str, Callable[[argparse.ArgumentParser], None], Handler]] = []


def command(
    name: str, help: str
) -> Callable[[Callable[[argparse.ArgumentParser], None]], Callable[[Handler], Handler]]:
    """Register a subcommand: ``@command(name, help)(configure)(handler)``."""

    def with_args(configure: Callable[[argparse.ArgumentParser], None]) -> Callable[[Handler], Handler]:
        def register(handler: Handler) -> Handler:
            COMMANDS.append((name, help, configure, handler))
            return handler

        return register

    return with_args


class ProgressLine:
    """A progress line for long work (``verify``, ``backup``, a compaction), redrawn in place on stderr.

    Drawn only when that stream is a terminal, at most ten times a second, so
    scripts and logs never see it; called as ``progress(done, total)``.
    """

    def __init__(
        self,
        label: str,
        stream: Any,
        enabled: bool,
        clock: Callable[[], float] = time.monotonic,
        *,
        unit: str = "",
    ):
        self.label = label
        self.stream = stream
        self.enabled = enabled
        self.clock = clock
        self.unit = unit
        """``"bytes"``: amounts drawn in human units (``12.5 MiB/40.0 MiB``) with a rate."""
        self._drawn_at: float | None = None
        self._started: float | None = None

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = self.clock()
        if self._started is None:
            self._started = now
        if done < total and self._drawn_at is not None and now - self._drawn_at < 0.1:
            return
        self._drawn_at = now
        width = 30
        filled = width * done // total if total else width
        pct = 100 * done // total if total else 100
        amount = f"{human_size(done)}/{human_size(total)}" if self.unit == "bytes" else f"{done}/{total}"
        self.stream.write(
            f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {amount} {pct}%"
            + self._rate_and_eta(done, total, now - self._started)
        )
        self.stream.flush()

    def _rate_and_eta(self, done: int, total: int, elapsed: float) -> str:
        """`` 3.1 MiB/s ETA 1min 4s`` while work remains (nothing before a rate is known)."""
        if done >= total or done <= 0 or elapsed <= 0:
            return "\x1b[K"  # clear what a longer earlier line left
        from ..duration import format_duration

        rate = done / elapsed
        shown = f"{human_size(int(rate))}/s" if self.unit == "bytes" else f"{rate:.1f}/s"
        return f" {shown} ETA {format_duration((total - done) / rate)}\x1b[K"

    def __enter__(self) -> ProgressLine:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._drawn_at is not None:
            self.stream.write("\n")
            self.stream.flush()


class Output:
    """Human tables or JSON, chosen once per invocation; progress lines on stderr.

    ``as_jsonl`` (``--jsonl``) is JSON too (``as_json`` is then true, so every command's
    machine-readable branch runs), written one compact object per line: a listing's rows
    one per line, a single result on one line. ``--json`` keeps its pretty document (an
    array for a listing) for the scripts that parse it; a pretty array cut by ``| head`` is
    not JSON, lines are, and ``jq`` reads them as a stream."""

    def __init__(
        self,
        as_json: bool,
        stream: Any = None,
        *,
        progress_stream: Any = None,
        show_progress: bool = True,
        as_jsonl: bool = False,
    ) -> None:
        self.as_json = as_json or as_jsonl
        self.as_jsonl = as_jsonl
        self.stream = stream or sys.stdout
        self.progress_stream = progress_stream or sys.stderr
        self.show_progress = show_progress

    def progress(self, label: str, *, unit: str = "") -> ProgressLine:
        """A :class:`ProgressLine` for one long step (drawn only on a terminal); ``unit="bytes"``."""
        isatty = getattr(self.progress_stream, "isatty", None)
        return ProgressLine(
            label, self.progress_stream, self.show_progress and bool(isatty and isatty()), unit=unit
        )

    def emit(self, data: Any, *, columns: Sequence[str] | None = None, title: str | None = None) -> None:
        if self.as_jsonl:
            for item in data if isinstance(data, list) else [data]:
                self.stream.write(json.dumps(item, sort_keys=True, default=str) + "\n")
            return
        if self.as_json:
            json.dump(data, self.stream, indent=2, sort_keys=True, default=str)
            self.stream.write("\n")
            return
        if title:
            self.stream.write(f"{title}\n")
        if isinstance(data, list) and columns is not None:
            self.table(data, columns)
        elif isinstance(data, dict):
            width = max((len(str(k)) for k in data), default=0)
            for k, v in data.items():
                self.stream.write(f"{str(k).ljust(width)}  {_fmt(v)}\n")
        else:
            self.stream.write(f"{_fmt(data)}\n")

    def table(self, rows: Iterable[dict[str, Any]], columns: Sequence[str]) -> None:
        rows = list(rows)
        cells = [[_fmt(r.get(c)) for c in columns] for r in rows]
        widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
        self.stream.write("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths)).rstrip() + "\n")
        for row in cells:
            self.stream.write("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() + "\n")
        if not rows:
            self.stream.write("(none)\n")

    def line(self, text: str) -> None:
        if not self.as_json:
            self.stream.write(text + "\n")


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bytes):
        return render_bytes(v)
    if isinstance(v, float):
        return f"{v:.3f}"
    if isinstance(v, dict):  # e.g. request counts: `get_range=2858 list=10`, not a Python repr
        return " ".join(f"{k}={_fmt(x)}" for k, x in v.items()) or "-"
    return str(v)


TEXT_PREFIX = "text:"
"""Marks literal text on the command line: ``text:0xford`` is the 6 bytes ``0xford``."""


def render_bytes(b: bytes) -> str:
    """Printable text as is, anything else as ``0x...`` hex; text that would read
    as hex or as the escape itself is shown as ``text:...`` (so output parses back)."""
    try:
        s = b.decode("utf-8")
        # A leading combining mark has nothing to sit on: binary bytes that happen to be UTF-8
        # (0xdead is U+07AD) would print as a stray accent nobody can type back.
        if s.isprintable() and not unicodedata.category(s[:1] or "a").startswith("M"):
            if s.startswith(("0x", TEXT_PREFIX)):
                return TEXT_PREFIX + s
            return s
    except UnicodeDecodeError:
        pass
    return "0x" + b.hex()


def parse_bytes(text: str) -> bytes:
    """A key or value from the command line, read one way only:

    ``text:REST`` is the UTF-8 of REST, whatever it is; ``0xHEX`` is hex
    bytes; anything else is UTF-8. So ``put text:0xford oxford`` stores the
    key ``0xford``, and ``text:text:a`` the key ``text:a``.
    """
    if text.startswith(TEXT_PREFIX):
        return _utf8(text[len(TEXT_PREFIX) :])
    if text.startswith("0x") and len(text) > 2:
        try:
            return bytes.fromhex(text[2:])
        except ValueError as exc:
            raise InvalidArgument(
                f"{text!r} starts with 0x but is not hex; write {TEXT_PREFIX}{text} for that literal text"
            ) from exc
    return _utf8(text)


def _utf8(text: str) -> bytes:
    """An argument's UTF-8; bytes that are not UTF-8 (Python decodes them from argv as lone
    surrogates) are InvalidArgument naming the ``0x`` form, not a UnicodeEncodeError."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        try:
            raw = text.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            raise InvalidArgument(f"{text!r} is not UTF-8 text; give the bytes in hex, 0x...") from None
        raise InvalidArgument(f"{text!r} is not UTF-8 text; give the bytes in hex: 0x{raw.hex()}") from None


def id_list(ids: Sequence[int], shown: int = 6) -> str:
    """Manifest ids for a human line: all of a few, else the count with the first and last
    (a busy writer's view checkpoints keep ~100 versions active: a line per pass listed them all;
    ``--json`` keeps the full list)."""
    if len(ids) <= shown:
        return str(list(ids))
    head = ", ".join(str(i) for i in ids[: shown - 1])
    return f"[{head}, ... {ids[-1]}] ({len(ids)})"
