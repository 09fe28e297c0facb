"""What every ``shaledb`` command shares: the command registry, the output (a human
table or JSON, a progress line on a terminal), byte and size formatting, exit codes."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..errors import InvalidArgument

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3

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

    def __init__(self, label: str, stream: Any, enabled: bool, clock: Callable[[], float] = time.monotonic):
        self.label = label
        self.stream = stream
        self.enabled = enabled
        self.clock = clock
        self._drawn_at: float | None = None

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = self.clock()
        if done < total and self._drawn_at is not None and now - self._drawn_at < 0.1:
            return
        self._drawn_at = now
        width = 30
        filled = width * done // total if total else width
        pct = 100 * done // total if total else 100
        self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} {pct}%")
        self.stream.flush()

    def __enter__(self) -> ProgressLine:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._drawn_at is not None:
            self.stream.write("\n")
            self.stream.flush()


class Output:
    """Human tables or JSON, chosen once per invocation; progress lines on stderr."""

    def __init__(
        self, as_json: bool, stream: Any = None, *, progress_stream: Any = None, show_progress: bool = True
    ) -> None:
        self.as_json = as_json
        self.stream = stream or sys.stdout
        self.progress_stream = progress_stream or sys.stderr
        self.show_progress = show_progress

    def progress(self, label: str) -> ProgressLine:
        """A :class:`ProgressLine` for one long step (drawn only on a terminal)."""
        isatty = getattr(self.progress_stream, "isatty", None)
        return ProgressLine(label, self.progress_stream, self.show_progress and bool(isatty and isatty()))

    def emit(self, data: Any, *, columns: Sequence[str] | None = None, title: str | None = None) -> None:
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
    return str(v)


def render_bytes(b: bytes) -> str:
    """Printable text as is, anything else as ``0x...`` hex."""
    try:
        s = b.decode("utf-8")
        if s.isprintable():
            return s
    except UnicodeDecodeError:
        pass
    return "0x" + b.hex()


def parse_bytes(text: str) -> bytes:
    """A key or value from the command line: ``0x...`` is hex, anything else UTF-8."""
    if text.startswith("0x") and len(text) > 2:
        try:
            return bytes.fromhex(text[2:])
        except ValueError as exc:
            raise InvalidArgument(f"{text!r} starts with 0x but is not hex") from exc
    return text.encode("utf-8")


def human_size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n = n / 1024  # type: ignore[assignment]
    return str(n)
