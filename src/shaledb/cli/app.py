"""The ``shaledb`` command line: ``shaledb --path URL <command> [options]``.

Output is a human table by default and JSON with ``--json``; long commands
draw a progress line on stderr when it is a terminal. Errors print
one line (``shaledb: error: ...``) unless ``--debug`` asks for the traceback.
Exit codes: 0 success, 1 a shaledb error (corruption, fenced, unavailable),
2 bad usage or arguments, 3 not found (missing database, checkpoint or key).

Commands register themselves with :func:`command`; each module that adds a
capability (compaction, checkpoints, the journal) adds its commands in
``shaledb/cli/*.py`` and is imported by :func:`build_parser`.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..errors import InvalidArgument, NotFound, ShaleError

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3

Handler = Callable[[argparse.Namespace, "Output"], int | None]
_COMMANDS: list[tuple[str, str, Callable[[argparse.ArgumentParser], None], Handler]] = []


def command(
    name: str, help: str
) -> Callable[[Callable[[argparse.ArgumentParser], None]], Callable[[Handler], Handler]]:
    """Register a subcommand: ``@command(name, help)(configure)(handler)``."""

    def with_args(configure: Callable[[argparse.ArgumentParser], None]) -> Callable[[Handler], Handler]:
        def register(handler: Handler) -> Handler:
            _COMMANDS.append((name, help, configure, handler))
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


def build_parser() -> argparse.ArgumentParser:
    from . import core as cli_core  # noqa: F401 - registers the commands

    for mod in ("compaction", "admin", "journal", "verify"):
        try:
            __import__(f"shaledb.cli.{mod}")
        except ModuleNotFoundError as exc:
            if exc.name != f"shaledb.cli.{mod}":
                raise
    parser = argparse.ArgumentParser(prog="shaledb", description="Inspect and operate a shaledb database.")
    parser.add_argument(
        "--path", required=False, help="database URL (local path, file://, memory://, s3://, ...)"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable JSON output")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    parser.add_argument(
        "--no-progress", action="store_true", help="no progress line on stderr (drawn only on a terminal)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    seen = set()
    for name, help_text, configure, handler in _COMMANDS:
        if name in seen:
            continue
        seen.add(name)
        p = sub.add_parser(name, help=help_text, description=help_text)
        configure(p)
        p.set_defaults(handler=handler)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if not getattr(args, "handler", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    if args.path is None and not getattr(args, "no_path", False):
        parser.error("--path URL is required")
    out = Output(args.json, show_progress=not args.no_progress)
    try:
        rc = args.handler(args, out)
        return EXIT_OK if rc is None else rc
    except KeyboardInterrupt:
        return 130
    except (ShaleError, OSError) as exc:
        if args.debug:
            raise
        code = (
            EXIT_NOT_FOUND
            if isinstance(exc, NotFound)
            else EXIT_USAGE
            if isinstance(exc, InvalidArgument)
            else EXIT_ERROR
        )
        sys.stderr.write(f"shaledb: error: {type(exc).__name__}: {exc}\n")
        return code


if __name__ == "__main__":
    # Run through the package module so commands register where main() looks for them.
    from shaledb.cli import main as _main

    sys.exit(_main())
