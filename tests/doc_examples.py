"""Running the code examples of README.md and docs/ (tests/api/test_api_docs_examples.py, and
tests/spark/test_spark_docs_examples.py for the blocks that need Spark).

A page's fenced ``python`` blocks run in order in one namespace (a later block continues an
earlier one), each compiled with the page's own file name and line numbers, so a failure's
traceback points into the Markdown. Top-level ``await``, ``async with`` and ``async for`` run
on one event loop per page. ``s3://bucket/...`` URLs are rewritten to a fresh prefix on the
test session's moto server, which the test points the ``AWS_*`` variables at (as a user
would). A bare expression whose trailing comment starts with a Python literal
(``db.get(b"k")  # b"v"``, or ``# [b"a", None]: ...`` up to the colon) must evaluate to it.

A block the tests cannot run is marked on its page by ``<!-- no-test: why -->`` on the line
before the fence; a reason is required.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import io
import re
import textwrap
import tokenize
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SKIPPED_PAGES = frozenset({"docs/benchmarks.md"})  # commands and figures of benchmark runs, not examples

FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S
)
NO_TEST = re.compile(r"^\s*<!--\s*no-test:(?P<reason>.*?)-->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: str  # path from the repository root
    line: int  # line of the block's first code line
    lang: str
    code: str  # dedented
    skip: str | None  # the reason of a no-test marker

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[str]:
    """Every Markdown page with examples: README.md and docs/**, benchmarks excepted."""
    found = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    names = [p.relative_to(ROOT).as_posix() for p in found]
    return [n for n in names if n not in SKIPPED_PAGES]


def blocks(page: str, text: str | None = None) -> list[Block]:
    """The fenced blocks of a page, in order."""
    if text is None:
        text = (ROOT / page).read_text()
    out = []
    for m in FENCE.finditer(text):
        first = text.count("\n", 0, m.start()) + 1  # the fence's line
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = NO_TEST.match(before)
        skip = None
        if marker:
            skip = marker.group("reason").strip()
            assert skip, f"{page}:{first}: a no-test marker must say why"
        info = m.group("info").strip().split()
        out.append(Block(page, first + 1, info[0] if info else "", textwrap.dedent(m.group("body")), skip))
    return out


def uses_spark(block: Block) -> bool:
    """A block of docs/spark.md, or one that uses a Spark session named ``spark``."""
    if block.page == "docs/spark.md":
        return True
    tree = ast.parse(block.code)
    return any(isinstance(n, ast.Name) and n.id == "spark" for n in ast.walk(tree))


def python_blocks(page: str, spark: bool) -> list[Block]:
    return [b for b in blocks(page) if b.lang == "python" and uses_spark(b) == spark]


def _comments(code: str) -> dict[int, str]:
    out = {}
    for tok in tokenize.generate_tokens(io.StringIO(code).readline):
        if tok.type == tokenize.COMMENT:
            out[tok.start[0]] = tok.string[1:].strip()
    return out


def documented_value(comment: str) -> ast.expr | None:
    """The Python literal a comment starts with (all of it, or up to its first colon)."""
    for text in (comment, comment.split(":", 1)[0]):
        try:
            ast.literal_eval(text.strip())
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        return ast.parse(text.strip(), mode="eval").body
    return None


class _CheckResults(ast.NodeTransformer):
    """``expr  # literal`` becomes ``__doc_check__(expr, literal, line)``."""

    def __init__(self, comments: dict[int, str], starts: dict[int, int], offset: int) -> None:
        self.offset = offset
        self.comments = comments
        self.starts = starts
        self.checked: list[int] = []

    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        line = node.end_lineno or node.lineno
        comment = self.comments.get(line)
        if comment is None or self.starts.get(node.lineno) != 1 or node.lineno != line:
            return node
        want = documented_value(comment)
        if want is None or isinstance(node.value, ast.Constant):
            return node
        self.checked.append(line)
        for n in ast.walk(want):
            ast.copy_location(n, node)
        call = ast.Call(
            func=ast.Name("__doc_check__", ast.Load()),
            args=[node.value, want, ast.Constant(line + self.offset)],
            keywords=[],
        )
        return ast.copy_location(ast.Expr(call), node)


def compile_block(block: Block, code: str) -> tuple[Any, list[int]]:
    """``code`` (the block's, rewritten) compiled with the page's name and lines; the lines
    whose documented value is checked."""
    tree = ast.parse(code)
    starts: dict[int, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt):
            starts[node.lineno] = starts.get(node.lineno, 0) + 1
    checker = _CheckResults(_comments(code), starts, block.line - 1)
    tree = ast.fix_missing_locations(checker.visit(tree))
    ast.increment_lineno(tree, block.line - 1)
    compiled = compile(tree, str(ROOT / block.page), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    return compiled, [block.line - 1 + n for n in checker.checked]


class DocCheckFailed(AssertionError):
    pass


def _make_check(page: str) -> Callable[[Any, Any, int], None]:
    def check(got: Any, want: Any, line: int) -> None:
        if got != want:
            raise DocCheckFailed(f"{page}:{line}: the page says {want!r}, the code gives {got!r}")

    return check


@dataclass
class PageRun:
    """One page's namespace and event loop."""

    page: str
    rewrite: Callable[[str], str]
    namespace: dict[str, Any]
    loop: asyncio.AbstractEventLoop
    checked: list[int]

    @classmethod
    def start(cls, page: str, rewrite: Callable[[str], str]) -> PageRun:
        ns: dict[str, Any] = {"__name__": "__doc_example__", "__doc_check__": _make_check(page)}
        return cls(page, rewrite, ns, asyncio.new_event_loop(), [])

    def run_source(self, source: str) -> None:
        """Code the test supplies (what the page takes as given)."""
        self._run(compile(source, "<given>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT))

    def run_block(self, block: Block) -> None:
        compiled, checked = compile_block(block, self.rewrite(block.code))
        self.checked += checked
        self._run(compiled)

    def _run(self, compiled: Any) -> None:
        result = eval(compiled, self.namespace)
        if inspect.iscoroutine(result):
            self.loop.run_until_complete(result)

    def close(self, opened: list[Any]) -> None:
        """Closes every handle the page opened (a fragment leaves its ``db`` open), newest first."""
        try:
            handles = [v for v in self.namespace.values() if _is_handle(v)]
            for h in [*reversed(handles), *reversed(opened)]:
                result = h.close()
                if inspect.iscoroutine(result):
                    self.loop.run_until_complete(result)
        finally:
            self.loop.close()


def _is_handle(value: Any) -> bool:
    return type(value).__module__.startswith("shaledb.") and callable(getattr(value, "close", None))


def track_opens(patch: Callable[[Any, str, Any], None]) -> list[Any]:
    """Records every Db and DbReader opened (a page may rebind a name to a second one)."""
    import shaledb

    opened: list[Any] = []
    for cls, name in [
        (shaledb.Db, "open"),
        (shaledb.Db, "open_from_checkpoint"),
        (shaledb.DbReader, "open"),
    ]:
        original = getattr(cls, name)

        def wrapped(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            handle = _original(*args, **kwargs)
            opened.append(handle)
            return handle

        patch(cls, name, wrapped)
    return opened


def shell_lines(block: Block) -> Iterator[tuple[int, str]]:
    """The command lines of a shell block with their page lines (``$ `` prompts dropped;
    in a ``console`` block, only the prompted lines)."""
    for i, raw in enumerate(block.code.splitlines()):
        line = raw.strip()
        if block.lang == "console":
            if not line.startswith("$ "):
                continue
            line = line[2:]
        elif line.startswith("$ "):
            line = line[2:]
        if line and not line.startswith("#"):
            yield block.line + i, line
