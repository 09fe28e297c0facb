"""Every relative link of the Markdown pages leads somewhere: README.md, CONTRIBUTING.md,
bench/README.md and every page under docs/.

Why: ``make docs`` (mkdocs --strict) checks only the API reference in docs/api; the guides,
the design and format pages and README.md are read on GitHub, where a renamed page or a
reworded heading leaves a link that opens nothing and nothing reports it. A link here is a
Markdown link or image, ``[text](target)`` or ``[text]: target``, outside code; its file must
exist and its ``#anchor`` must be a heading of the page (GitHub's slugs: lower case,
punctuation dropped, spaces to hyphens, ``-1``, ``-2`` for repeats) or an ``<a id=...>``.

The API reference's own build (mkdocs.yml) refuses a link to a missing anchor too: mkdocs
logs one at INFO only, which ``--strict`` let through, until mkdocs.yml raised it to a warning.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FENCED = re.compile(r"^ *(```|~~~).*?^ *\1", re.S | re.M)
CODE_SPAN = re.compile(r"(`+)(?!`).+?(?<!`)\1", re.S)
INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.M)
HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$", re.M)
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def link_pages(root: Path) -> list[Path]:
    """The pages whose links are checked: the top-level pages, bench/'s and docs/**."""
    return [
        *sorted(root.glob("*.md")),
        *sorted((root / "bench").glob("*.md")),
        *sorted((root / "docs").rglob("*.md")),
    ]


def _prose(text: str) -> str:
    """``text`` without fenced blocks and code spans, line numbers kept (their newlines stay)."""
    blank = lambda m: re.sub(r"[^\n]", " ", m.group(0))  # noqa: E731
    return CODE_SPAN.sub(blank, FENCED.sub(blank, text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = page.read_text()
    found: set[str] = set(HTML_ANCHOR.findall(text))
    seen: dict[str, int] = {}
    for m in HEADING.finditer(FENCED.sub("", text)):
        s = slug(m.group(1))
        n = seen.get(s, 0)
        seen[s] = n + 1
        found.add(s if n == 0 else f"{s}-{n}")
    return found


def broken_links(page: Path, root: Path) -> list[str]:
    """``page:line: target: why`` for each relative link of ``page`` that leads nowhere."""
    text = _prose(page.read_text())
    targets = [(m.start(), m.group(1)) for m in INLINE_LINK.finditer(text)]
    targets += [(m.start(), m.group(1)) for m in REFERENCE_LINK.finditer(text)]
    out = []
    for at, target in sorted(targets):
        if SCHEME.match(target):  # https:, mailto:, ...: not ours to check offline
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        where = f"{page.relative_to(root).as_posix()}:{text.count(chr(10), 0, at) + 1}: {target}"
        if not dest.exists():
            out.append(f"{where}: no such file")
        elif anchor and dest.suffix != ".md":
            out.append(f"{where}: an anchor in a file that is not a Markdown page")
        elif anchor and anchor not in anchors(dest):
            out.append(f"{where}: {dest.name} has no heading with anchor #{anchor}")
    return out


def test_every_relative_link_of_the_pages_leads_somewhere() -> None:
    pages = link_pages(ROOT)
    assert ROOT / "README.md" in pages and ROOT / "docs" / "architecture.md" in pages
    broken = [b for page in pages for b in broken_links(page, ROOT)]
    assert not broken, "broken links:\n" + "\n".join(broken)


@pytest.mark.parametrize(
    ("link", "why"),
    [
        ("[gone](docs/gone.md)", "no such file"),
        ("[gone](docs/guide.md#no-such-heading)", "has no heading with anchor #no-such-heading"),
        ("![img](docs/missing.png)", "no such file"),
        ("[here](#nowhere)", "has no heading with anchor #nowhere"),
        ("[ref]: docs/gone.md", "no such file"),
        ("[anchor](LICENSE#x)", "not a Markdown page"),
    ],
)
def test_a_broken_link_is_reported_with_its_page_and_line(tmp_path: Path, link: str, why: str) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "LICENSE").write_text("text\n")
    (tmp_path / "docs" / "guide.md").write_text("# Guide\n\n## The `put` call: options & limits\n")
    page = tmp_path / "README.md"
    page.write_text(f"# Title\n\nSee\n{link}\n")
    (broken,) = broken_links(page, tmp_path)
    assert broken.startswith("README.md:4: ") and broken.endswith(why), broken


def test_links_that_lead_somewhere_pass(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text(
        '# Guide\n\n## The `put` call: options & limits\n\n## Notes\n\n## Notes\n\n<a id="custom"></a>\n'
        "```md\n# Not a heading\n```\n"
    )
    page = tmp_path / "README.md"
    page.write_text(
        "# Title\n\n## Quick start\n\n"
        "[a](docs/guide.md) [b](docs/guide.md#the-put-call-options--limits) [c](docs/guide.md#notes-1)\n"
        "[d](docs/guide.md#custom) [e](#quick-start) [f](https://example.com/x#y) [g](docs/)\n"
        "`[in code](nowhere.md)`\n\n```\n[in a block](nowhere.md)\n```\n"
    )
    assert broken_links(page, tmp_path) == []


def test_the_api_reference_build_refuses_a_link_to_a_missing_anchor(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="the docs extra is not installed (make .venv/.docs)")
    pytest.importorskip("mkdocstrings", reason="the docs extra is not installed (make .venv/.docs)")
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(ROOT / "mkdocs.yml", project / "mkdocs.yml")
    shutil.copytree(ROOT / "docs" / "api", project / "docs" / "api")
    (project / "src").symlink_to(ROOT / "src")
    index = project / "docs" / "api" / "index.md"
    index.write_text(index.read_text() + "\nSee [the readers](reader.md#no-such-heading).\n")
    p = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert p.returncode != 0, p.stdout + p.stderr
    assert "reader.md#no-such-heading" in p.stderr, p.stderr
