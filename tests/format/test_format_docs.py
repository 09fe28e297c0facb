"""The format docs show real bytes: each ``<!-- golden:NAME -->`` example must be
exactly what ``format_testkit.DOC_DUMPS[NAME]`` renders from the golden files.

The annotated dumps are produced by an independent, spec-driven walk over the
bytes (``format_testkit.fields_*``), so this also checks that the layouts the
docs describe account for every byte the encoders write.
"""

from __future__ import annotations

import re

import pytest
from format_testkit import (
    DOC_DUMPS,
    DOCS_DIR,
    GOLDENS,
    REGEN,
    check_fields,
    fields_block_payload,
    fields_bloom,
    fields_manifest,
    fields_sst,
    fields_stored,
    golden_bytes,
)

DOCS = ["README.md", "block.md", "bloom.md", "sst.md", "wal.md", "manifest.md", "range-dels.md"]
MARKER = re.compile(r"<!-- golden:([a-z0-9_]+) -->\n```text\n(.*?)```\n", re.DOTALL)


def test_every_format_doc_exists_with_the_required_sections() -> None:
    for name in DOCS:
        text = (DOCS_DIR / name).read_text()
        assert "## Versioning" in text or name == "README.md", f"{name} lacks a versioning section"
        if name != "README.md":
            assert "\n+--" in text, f"{name} lacks an ASCII layout"
            assert "| Field | Type | Meaning" in text, f"{name} lacks a field table"
            assert MARKER.search(text), f"{name} lacks a worked example with golden bytes"


@pytest.mark.parametrize("name", DOCS)
def test_doc_examples_match_the_golden_bytes(name: str) -> None:
    path = DOCS_DIR / name
    text = path.read_text()
    found = MARKER.findall(text)
    for dump, _ in found:
        assert dump in DOC_DUMPS, f"{name}: unknown golden example {dump!r}"
    if REGEN:
        path.write_text(
            MARKER.sub(lambda m: f"<!-- golden:{m[1]} -->\n```text\n{DOC_DUMPS[m[1]]()}\n```\n", text)
        )
        return
    for dump, shown in found:
        assert shown == DOC_DUMPS[dump]() + "\n", (
            f"{name}: the {dump!r} example differs from the bytes the code writes; "
            "run with SHALEDB_REGEN_GOLDEN=1 to refresh it"
        )


def test_every_doc_example_is_used() -> None:
    used = {m for name in DOCS for m, _ in MARKER.findall((DOCS_DIR / name).read_text())}
    assert used == set(DOC_DUMPS)


@pytest.mark.parametrize("name", sorted(GOLDENS))
def test_spec_walk_accounts_for_every_byte(name: str) -> None:
    """Walking each golden object by the documented layout consumes it exactly."""
    data = golden_bytes(name)
    if name.endswith(".sst"):
        fields = fields_sst(data)
    elif name.endswith(".manifest"):
        fields = fields_manifest(data)
    elif name.startswith("bloom"):
        fields = fields_bloom(data)
    elif name == "block_payload.bin":
        fields = fields_block_payload(data)
    else:
        fields = fields_stored(data)
    check_fields(data, fields)
