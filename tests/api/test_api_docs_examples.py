"""The examples users copy first run as written: every ```python block of README.md and the
guides under docs/ (Spark ones: tests/spark/test_spark_docs_examples.py), the ```sh command
lines of README.md and docs/cli.md, every ``--option`` the pages show for a command, and every
``shaledb.x.y`` / ``Db.x`` name they mention.

How a page runs (blocks in order, one namespace, s3://bucket/ on the moto server, documented
values such as ``# b"alice"`` checked, ``<!-- no-test: why -->`` markers): tests/doc_examples.py.
What a page takes as given -- an open ``db``, its ``url``, a consumer's ``apply`` -- is in
GIVEN below, and code a block needs before it that its page leaves to the reader (the clone's
URL, a database without live checkpoints to destroy hard) in BEFORE, keyed by the start of the
block's first line; both stay small and hold only what the page's text says exists.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

import pytest

from doc_examples import ROOT, Block, PageRun, blocks, pages, python_blocks, shell_lines, track_opens
from shaledb.errors import SetupError

# Names each page uses without defining them (``s3://bucket/`` is rewritten like the page's own).
GIVEN: dict[str, str] = {
    "docs/checkpoints-readers-clones.md": """
import shaledb
from datetime import timedelta
url = "s3://bucket/db"
db = shaledb.Db.open(url)
db.put(b"k", b"v")
""",
    "docs/journal.md": """
import shaledb
from datetime import timedelta
url = "s3://bucket/db"
big_value = bytes(range(256)) * 40
""",
    "docs/range-deletes.md": """
from shaledb import Db, WriteBatch, aio
db = Db.open("s3://bucket/db")
db.put(b"user/0150", b"x")
adb = await aio.Db.open("s3://bucket/async-db")
start, end = b"a", b"b"
""",
    "docs/service.md": """
from shaledb import Settings
stored_cursor = None
seen = []
def apply(kind, key, value):
    seen.append((kind, key, value))
def store_with_my_output(cursor):
    if len(seen) == 2:  # what the writer below wrote: stop following
        feed.close()
""",
    "docs/transactions.md": """
import shaledb
from datetime import datetime, timezone
url = "s3://bucket/db"
db = shaledb.Db.open(url)
db.put(b"acct/1", b"100")
db.put(b"acct/2", b"50")
""",
}

# Code run before the block whose first line this is (what the page leaves to the reader).
BEFORE: dict[tuple[str, str], str] = {
    # A clone of the database at the page's url (from the checkpoint of the first block).
    ("docs/checkpoints-readers-clones.md", "clone = shaledb.Db.open_from_checkpoint("): """
parent_url, clone_url = url, "s3://bucket/clone"
""",
    # A hard destroy refuses a database with live checkpoints (the page says so): drop the
    # clone and the checkpoints the page made.
    ("docs/checkpoints-readers-clones.md", "shaledb.admin.destroy(url)"): """
clone.close()
db.close()
shaledb.admin.destroy(clone_url, soft=False)
for c in shaledb.admin.list_checkpoints(url):
    shaledb.admin.delete_checkpoint(url, c.id)
""",
    # The change feed follows the database the service writes; the block above closed its db.
    ("docs/service.md", "feed = db.changes(since=stored_cursor)"): """
db = shaledb.Db.open("s3://bucket/feed-db")
db.put(b"a", b"1")
db.delete(b"a")
""",
    # The merge example opens the database again with a merge operator.
    ("docs/transactions.md", "from shaledb import Db, Settings, WriteBatch"): "db.close()",
    ("docs/transactions.md", "db = shaledb.Db.open(url, settings=shaledb.Settings(history_"): """
db.close()
""",
}


def _first_line(block: Block) -> str:
    return block.code.strip().splitlines()[0].strip()


def _before(page: str, block: Block) -> str | None:
    found = [
        code for (p, first), code in BEFORE.items() if p == page and _first_line(block).startswith(first)
    ]
    assert len(found) <= 1, f"{block.where}: more than one BEFORE entry"
    return found[0] if found else None


def _page_ids(spark: bool) -> list[str]:
    return [p for p in pages() if python_blocks(p, spark)]


@pytest.fixture
def s3(s3_url_factory: Callable[[], Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    """A fresh prefix on the moto server, which the ``AWS_*`` variables now point at (as a
    user's environment would): the pages' ``s3://bucket/`` becomes ``<its URL>/``."""
    location = s3_url_factory()
    for name, value in location.env().items():
        monkeypatch.setenv(name, value)
    return location


def _rewriter(location: Any) -> Callable[[str], str]:
    return lambda code: code.replace("s3://bucket/", f"{location.url}/")


@pytest.fixture
def quiet_side_effects(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Undo what pages do to the process: logging set-up, Prometheus collectors and servers."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {n: logging.getLogger(n).level for n in ("shaledb", "shaledb.store")}
    servers: list[Any] = []
    registry = None
    try:
        import prometheus_client
        from prometheus_client import REGISTRY

        registry = REGISTRY
        before = set(REGISTRY._collector_to_names)
        original = prometheus_client.start_http_server

        def start_on_a_free_port(port: int, *args: Any, **kwargs: Any) -> Any:
            server = original(0, *args, **kwargs)  # the page's port may be taken on this machine
            servers.append(server)
            return server

        monkeypatch.setattr(prometheus_client, "start_http_server", start_on_a_free_port)
    except ImportError:
        pass
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        for name, lvl in levels.items():
            logging.getLogger(name).setLevel(lvl)
        for httpd, thread in servers:
            httpd.shutdown()
            httpd.server_close()
            thread.join(5)
        if registry is not None:
            for collector in set(registry._collector_to_names) - before:
                registry.unregister(collector)


@pytest.mark.timeout(120)  # a change feed that never ends would hang the run
@pytest.mark.parametrize("page", _page_ids(spark=False))
def test_the_page_examples_run(
    page: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    s3: Any,
    quiet_side_effects: None,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "shaledb.toml").write_text("flush_interval_s = 0.05\n")  # Settings.from_file's
    todo = python_blocks(page, spark=False)
    run = PageRun.start(page, _rewriter(s3))
    opened = track_opens(monkeypatch.setattr)
    try:
        if page in GIVEN:
            run.run_source(run.rewrite(GIVEN[page]))
        for block in todo:
            if block.skip:
                continue
            before = _before(page, block)
            if before:
                run.run_source(run.rewrite(before))
            run.run_block(block)
    finally:
        run.close(opened)


def test_every_given_and_before_names_a_block() -> None:
    """GIVEN and BEFORE follow the pages: a renamed page or block fails here, not silently."""
    assert set(GIVEN) <= set(_page_ids(spark=False))
    firsts = [(p, _first_line(b)) for p in pages() for b in python_blocks(p, spark=False)]
    unused = [
        key for key in BEFORE if not any(p == key[0] and first.startswith(key[1]) for p, first in firsts)
    ]
    assert unused == []


def test_skips_are_few_and_say_why() -> None:
    skipped = [b for p in pages() for b in blocks(p) if b.skip]
    assert all(b.skip for b in skipped)
    assert len(skipped) <= 3, [b.where for b in skipped]


def test_a_wrong_example_fails_naming_its_page_and_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The machinery itself: a wrong documented value and a wrong name both fail, pointing
    into the page."""
    monkeypatch.chdir(tmp_path)
    page = "docs/example.md"
    text = (
        "Intro.\n\n```python\nimport shaledb\ndb = shaledb.Db.open('./db')\n```\n\nMore.\n\n"
        "```python\ndb.put(b'k', b'v')\ndb.get(b'k')     # b'w'\n```\n\n"
        "```python\ndb.get(b'k')     # b'v': the value\ndb.gte(b'k')\n```\n"
    )
    found = blocks(page, text)
    assert [b.line for b in found] == [4, 11, 16]
    run = PageRun.start(page, lambda code: code)
    opened = track_opens(monkeypatch.setattr)
    try:
        run.run_block(found[0])
        with pytest.raises(
            AssertionError, match=r"docs/example.md:12: the page says b'w', the code gives b'v'"
        ):
            run.run_block(found[1])
        with pytest.raises(AttributeError) as e:
            run.run_block(found[2])
        assert run.checked == [12, 16]
        tb = e.traceback[-1]
        assert str(tb.path) == str(ROOT / page) and tb.lineno + 1 == 17
    finally:
        run.close(opened)


# The command lines of the ```sh examples of README.md and docs/cli.md run in order in a fresh
# working directory; each must exit 0, and print (stdout) these texts when listed here.
CLI_OUTPUT: dict[str, list[str]] = {
    "shaledb --path ./db put user:1 alice": [],
    "shaledb --path ./db scan --prefix user: --jsonl | head": [
        '{"key": "user:1", "key_hex"',
        '"value": "alice"',
    ],
    "shaledb --path ./db create-checkpoint --name nightly": ["nightly"],
    "shaledb --path ./db-copy clone --parent ./db --checkpoint nightly": ["db-copy"],
    "AWS_ENDPOINT_URL=http://127.0.0.1:9000 AWS_ALLOW_HTTP=true shaledb --path s3://bucket/db stats": [
        "sorted_runs"
    ],
}


def _cli_lines() -> list[tuple[str, int, str]]:
    out = []
    for page in ("README.md", "docs/cli.md"):
        for block in blocks(page):
            if block.lang in ("sh", "console", "shell", "bash") and not block.skip:
                out += [(page, n, line) for n, line in shell_lines(block)]
    return out


def test_the_cli_examples_run(tmp_path: Path, s3: Any) -> None:
    lines = _cli_lines()
    assert lines, "no command lines found"
    bindir = str(Path(sys.executable).parent)
    env = {**os.environ, **s3.env(), "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"}
    rewrite = _rewriter(s3)
    import shaledb

    with shaledb.Db.open(rewrite("s3://bucket/db")) as db:  # the stats example reads a database on S3
        db.put(b"user:1", b"alice")
    for page, n, line in lines:
        cmd = rewrite(line).replace("http://127.0.0.1:9000", s3.endpoint)
        p = subprocess.run(
            ["bash", "-o", "pipefail", "-c", cmd],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert p.returncode == 0, f"{page}:{n}: {line!r} exited {p.returncode}: {p.stderr}"
        for text in CLI_OUTPUT.get(line, []):
            assert text in p.stdout, f"{page}:{n}: {line!r} printed no {text!r}:\n{p.stdout}"
    rows = json.loads(
        subprocess.run(
            [*_cli(), "--path", "db-copy", "--json", "scan"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout
    )
    assert [(r["key"], r["value"]) for r in rows] == [("user:1", "alice")]
    assert set(CLI_OUTPUT) <= {line for _p, _n, line in lines}, "CLI_OUTPUT names a line no page shows"


def _cli() -> list[str]:
    exe = Path(sys.executable).with_name("shaledb")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "shaledb"]


def _cli_options() -> tuple[set[str], dict[str, set[str]]]:
    """The options of ``shaledb`` itself and of each command, from the parser."""
    import argparse

    from shaledb.cli.app import build_parser

    parser = build_parser()
    top = {o for a in parser._actions for o in a.option_strings}
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return top, {name: {o for a in p._actions for o in a.option_strings} for name, p in sub.choices.items()}


def _command_mentions(commands: Collection[str]) -> list[tuple[str, str]]:
    """``(where, text)`` of every command line the pages show: inline ``shaledb ...`` code
    (or ``COMMAND --option ...``), lines of fenced blocks, and the rows of docs/cli.md's
    command table."""
    import re

    found = []
    for page in pages():
        text = (ROOT / page).read_text()
        fenced = {b.line + i for b in blocks(page, text) for i in range(b.code.count("\n") + 1)}
        for n, line in enumerate(text.splitlines(), 1):
            if n in fenced:
                stripped = line.strip().removeprefix("$ ")
                if re.match(r"(python -m )?shaledb ", stripped):
                    found.append((f"{page}:{n}", stripped))
                continue
            spans = re.findall(r"`((?:python -m )?shaledb [^`]+)`", line)
            spans += [
                f"shaledb {m.group(0)}"
                for m in re.finditer(r"(?<=`)([a-z][a-z-]*) [^`]*--[^`]*(?=`)", line)
                if m.group(1) in commands
            ]
            found += [(f"{page}:{n}", s) for s in spans]
            if page == "docs/cli.md":
                row = re.match(r"\| `([a-z][a-z-]*)[^`]*` \|(.*)\|\s*$", line)
                if row:
                    found.append((f"{page}:{n}", f"shaledb {row.group(1)} {row.group(2)}"))
    return found


def test_every_cli_option_the_pages_show_exists() -> None:
    """A command line in the docs (``shaledb --path URL scan --count``, a synopsis line, a row
    of docs/cli.md's table) names only commands' own options or the global ones."""
    import re

    top, commands = _cli_options()
    mentions = _command_mentions(commands)
    assert len(mentions) > 30, mentions
    wrong = []
    for where, text in mentions:
        words = re.split(r"[\s|\[\]()]+", text)
        named = [w for w in words if w and all(part in commands for part in w.split("/"))]
        allowed = set(top)
        for word in named[:1]:
            for part in word.split("/"):
                allowed |= commands[part]
        for option in re.findall(r"(?<![\w-])--[a-z][a-z-]*", text):
            if option not in allowed:
                wrong.append(f"{where}: {option} ({text!r})")
    assert wrong == []


NOT_PYTHON_NAMES = {
    "shaledb.toml": "a settings file's name",
    "shaledb.options": "the metadata key of a Spark table's key column",
}


def _resolves(name: str) -> str | None:
    """Why ``name`` (``shaledb.a.b``) does not resolve to a module or attribute, or None (also
    when it needs an extra that is not installed, such as pyspark: not checked then)."""
    import importlib

    parts = name.split(".")
    obj: Any = importlib.import_module(parts[0])
    try:
        for part in parts[1:]:
            if hasattr(obj, part):
                obj = getattr(obj, part)
            elif inspect.ismodule(obj):
                obj = importlib.import_module(f"{obj.__name__}.{part}")
            else:
                return f"{obj!r} has no {part!r}"
    except ModuleNotFoundError as e:
        if e.name and not e.name.startswith("shaledb"):
            return None
        return f"no module {e.name}"
    except SetupError:  # (importing shaledb.spark.stream without the spark extra: ExtraMissing)
        return None
    return None


def _has(cls: type, name: str) -> bool:
    import dataclasses

    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    return hasattr(cls, name) or name in fields


def test_every_dotted_name_the_pages_show_exists() -> None:
    """``shaledb.engine.wal_read.fetch_wal_objects`` and ``Db.open_from_checkpoint``, in prose
    and code, name a module or attribute that exists (or a logger the package logs to)."""
    import re

    import shaledb

    classes = {n: c for n in shaledb.__all__ if isinstance(c := getattr(shaledb, n), type)}
    on_class = re.compile(rf"(?<![\w.])({'|'.join(classes)})\.([A-Za-z_]\w*)")

    loggers = {
        m
        for p in (ROOT / "src" / "shaledb").rglob("*.py")
        for m in re.findall(r'getLogger\("(shaledb[\w.]*)"\)', p.read_text())
    }
    wrong = []
    for page in pages():
        for n, line in enumerate((ROOT / page).read_text().splitlines(), 1):
            for name in re.findall(r"(?<![\w./-])shaledb(?:\.[A-Za-z_]\w*)+", line):
                if name in NOT_PYTHON_NAMES or name in loggers:
                    continue
                why = _resolves(name)
                if why:
                    wrong.append(f"{page}:{n}: {name}: {why}")
            for cls, attr in on_class.findall(line):
                if not _has(classes[cls], attr):
                    wrong.append(f"{page}:{n}: {cls}.{attr}: no such attribute")
    assert wrong == []
