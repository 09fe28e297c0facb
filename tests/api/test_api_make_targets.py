"""The ``make`` targets the pages name exist, and ``make`` alone lists them.

Why: README.md, CONTRIBUTING.md and the guides tell a newcomer to run ``make test``,
``make docs``, ``make soak`` ...; a renamed target would leave them with "No rule to make
target". And ``make`` alone (or ``make help``, the usual first try) created .venv and installed
pip into it, since the first rule of the Makefile was the default; it now prints the targets.
Only dry runs (``make -n``) here: nothing is built or installed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = ("README.md", "CONTRIBUTING.md", "bench/README.md", "docs")
# `make test`, `make demo DEMO_ARGS=...` in a code span, or a fenced command line `make lint  # ...`
MAKE_IN_SPAN = re.compile(r"`make ([^`\s=]+)[^`]*`")
MAKE_ON_LINE = re.compile(r"^\s*make ([^\s=#]+)", re.M)
FENCED = re.compile(r"^ *```[^\n]*\n(.*?)^ *```", re.S | re.M)

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")


def _pages() -> list[Path]:
    found: list[Path] = []
    for name in PAGES:
        path = ROOT / name
        found += sorted(path.rglob("*.md")) if path.is_dir() else [path]
    return found


def documented_targets() -> dict[str, str]:
    """Each target a page tells the reader to run, with the first page that names it."""
    targets: dict[str, str] = {}
    for page in _pages():
        text = page.read_text()
        names = MAKE_IN_SPAN.findall(text)
        for block in FENCED.findall(text):
            names += MAKE_ON_LINE.findall(block)
        for name in names:
            targets.setdefault(name, page.relative_to(ROOT).as_posix())
    return targets


def _make(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_pages_name_make_targets() -> None:
    targets = documented_targets()
    assert {"test", "lint", "docs", "demo", "lock"} <= set(targets), targets


def test_every_target_the_pages_name_is_a_rule_listed_by_make_help() -> None:
    listing = _make("help")
    assert listing.returncode == 0, listing.stderr
    for target, page in sorted(documented_targets().items()):
        dry = _make("-n", target)
        assert dry.returncode == 0 and "No rule to make target" not in dry.stderr, (
            f"{page} says `make {target}`, which make does not know: {dry.stderr.strip()}"
        )
        assert re.search(rf"^make {re.escape(target)}\s", listing.stdout, re.M), (
            f"{page} says `make {target}`, which `make help` does not list:\n{listing.stdout}"
        )


def test_make_alone_prints_the_targets_and_builds_nothing() -> None:
    dry = _make("-n")
    assert dry.returncode == 0, dry.stderr
    assert "echo" in dry.stdout and "make test " in dry.stdout, dry.stdout
    assert "-m venv" not in dry.stdout and "pip install" not in dry.stdout, dry.stdout
