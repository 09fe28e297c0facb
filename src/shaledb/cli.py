"""The ``shaledb`` command line: ``shaledb --path URL <command> [options]``.

Global options (``--path``, ``--json``, ``--debug``, ``--no-progress``) go
before or after the command (``shaledb.cli_options``). Keys and values are
UTF-8 text, ``0x...`` hex, or ``text:...`` for literal text that would
otherwise read as hex (``put text:0xford oxford``).

Output is a human table by default and JSON with ``--json``; listings stream
(``shaledb.cli_stream``: constant memory, and ``| head`` ends them quietly);
long commands draw a progress line in bytes with a rate and ETA on stderr
when it is a terminal. Errors print
one line (``shaledb: error: ...``) unless ``--debug`` asks for the traceback.
Exit codes: 0 success, 1 a shaledb error (corruption, fenced, unavailable),
2 bad usage or arguments, 3 not found (missing database, checkpoint or key).

Commands register themselves with :func:`command`; each module that adds a
capability (compaction, checkpoints, the journal) adds its commands in
``shaledb/cli_*.py`` and is imported by :func:`build_parser`.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .errors import InvalidArgument, NotFound, ShaleError
from .store.scrub import ScrubFilter, scrub

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
        from .duration import format_duration

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
    """Human tables or JSON, chosen once per invocation; progress lines on stderr."""

    def __init__(
        self, as_json: bool, stream: Any = None, *, progress_stream: Any = None, show_progress: bool = True
    ) -> None:
        self.as_json = as_json
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


TEXT_PREFIX = "text:"
"""Marks literal text on the command line: ``text:0xford`` is the 6 bytes ``0xford``."""


def render_bytes(b: bytes) -> str:
    """Printable text as is, anything else as ``0x...`` hex; text that would read
    as hex or as the escape itself is shown as ``text:...`` (so output parses back)."""
    try:
        s = b.decode("utf-8")
        if s.isprintable():
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
        return text[len(TEXT_PREFIX) :].encode("utf-8")
    if text.startswith("0x") and len(text) > 2:
        try:
            return bytes.fromhex(text[2:])
        except ValueError as exc:
            raise InvalidArgument(
                f"{text!r} starts with 0x but is not hex; write {TEXT_PREFIX}{text} for that literal text"
            ) from exc
    return text.encode("utf-8")


def human_size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n = n / 1024  # type: ignore[assignment]
    return str(n)


def build_parser() -> argparse.ArgumentParser:
    from . import cli_core  # noqa: F401 - registers the commands

    for mod in ("cli_compaction", "cli_admin", "cli_journal", "cli_verify", "cli_settings"):
        try:
            __import__(f"shaledb.{mod}")
        except ModuleNotFoundError as exc:
            if exc.name != f"shaledb.{mod}":
                raise
    from .cli_options import add_global_options, add_version, register_extra_commands

    register_extra_commands()
    parser = argparse.ArgumentParser(
        prog="shaledb",
        description="Inspect and operate a shaledb database.",
        epilog="Global options may also follow the command: shaledb scan --path DB --json.",
    )
    add_version(parser)
    add_global_options(parser, after_command=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    seen = set()
    for name, help_text, configure, handler in _COMMANDS:
        if name in seen:
            continue
        seen.add(name)
        p = sub.add_parser(name, help=help_text, description=help_text)
        configure(p)
        add_global_options(p, after_command=True)
        p.set_defaults(handler=handler)
    return parser


def _scrub_logs() -> None:
    """Every log line the CLI writes passes through the one scrubbing function."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, ScrubFilter) for f in handler.filters):
            handler.addFilter(ScrubFilter())


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    _scrub_logs()
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
    except BrokenPipeError:  # the reader of our output left (`scan | head -1`): not an error
        from .cli_stream import silence_stdout

        silence_stdout()
        return EXIT_OK
    except (ShaleError, OSError) as exc:
        if args.debug:
            sys.stderr.write(scrub("".join(traceback.format_exception(exc))))
        code = (
            EXIT_NOT_FOUND
            if isinstance(exc, NotFound)
            else EXIT_USAGE
            if isinstance(exc, InvalidArgument)
            else EXIT_ERROR
        )
        sys.stderr.write(f"shaledb: error: {type(exc).__name__}: {scrub(str(exc))}\n")
        return code
    except Exception as exc:  # noqa: BLE001 - a bug: show where, but never a secret it carried
        sys.stderr.write(scrub("".join(traceback.format_exception(exc))))
        return EXIT_ERROR


if __name__ == "__main__":
    # Run through the package module so commands register where main() looks for them.
    from shaledb.cli import main as _main

    sys.exit(_main())
