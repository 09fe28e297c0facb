"""Value-journal formats: golden bytes, the annotated examples of docs/format/journal.md,
and decoders that treat stored bytes as untrusted.

Golden files live in ``tests/journal/golden/``; regenerate them (and the doc
examples) only for a deliberate, versioned change::

    SHALEDB_REGEN_GOLDEN=1 .venv/bin/pytest tests/journal/test_journal_format.py
"""

from __future__ import annotations

import re
import struct
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "format"))

from format_testkit import (
    CREATED_AT_MS,
    NONCE,
    REGEN,
    Field,
    _Cursor,
    check_fields,
    fields_sst,
    render,
)
from hypothesis import HealthCheck, seed, settings
from journal_kit import JOURNAL_SEED

from shaledb.errors import CorruptionError
from shaledb.format.journal import (
    POINTER_SIZE_JOURNAL,
    POINTER_SIZE_WAL,
    POINTER_V2_SIZE_JOURNAL,
    POINTER_V2_SIZE_WAL,
    Pointer,
    decode_index_key,
    decode_pointer,
    encode_pointer,
    index_key,
    ranged_pointer,
    value_crc,
)
from shaledb.format.row import (
    FLAG_INDEX_TREE,
    KIND_POINTER,
    KIND_TOMBSTONE,
    KIND_VALUE,
    decode_extras,
    decode_terms,
    encode_payload,
    encode_terms,
)
from shaledb.format.sst import SST_JOURNAL, SstBuilder, decode_sst
from shaledb.format.wal import locate_values
from shaledb.journal.compaction import block_head


def fuzz(max_examples: int) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Hypothesis settings seeded with the journal tests' seed (printed on failure)."""

    def wrap(fn: Callable[..., None]) -> Callable[..., None]:
        configured = settings(
            max_examples=max_examples,
            database=None,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )(fn)
        return seed(JOURNAL_SEED)(configured)

    return wrap


GOLDEN = Path(__file__).parent / "golden"
DOC = Path(__file__).resolve().parents[2] / "docs" / "format" / "journal.md"
MARKER = re.compile(r"<!-- golden:([a-z0-9_]+) -->\n```text\n(.*?)```\n", re.DOTALL)
ULID = "01HF0000000000000000000003"
TERMS = {"dest": (b"LAX",), "tail": (b"N123", b"N456")}


def journal_rows() -> list[tuple[bytes, int, int, bytes]]:
    """A write batch with index terms, a delete, and a plain value, as a journal holds them."""
    flags, rich = encode_payload(b"value of k1", b"md", 1_700_000_060_000, encode_terms(TERMS))
    return [
        (b"k1", 20, KIND_VALUE | flags, rich),
        (index_key("dest", b"LAX", b"k1"), 20, KIND_VALUE | FLAG_INDEX_TREE, b""),
        (b"k2", 21, KIND_TOMBSTONE, b""),
        (b"k3", 22, KIND_VALUE, b"v3"),
    ]


def build_journal() -> bytes:
    b = SstBuilder(kind=SST_JOURNAL, block_size=64, created_at_ms=CREATED_AT_MS, nonce=NONCE)
    rows = journal_rows()
    b.add_many([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows])
    return b.finish()[0]


GOLDENS: dict[str, Callable[[], bytes]] = {
    "pointer_wal.bin": lambda: encode_pointer(Pointer("00000000000000000007", 4096, 1200, 3, 1024)),
    "pointer_journal.bin": lambda: encode_pointer(Pointer(ULID, 0, 140, 0, 11)),
    "pointer_wal_v2.bin": lambda: encode_pointer(
        Pointer("00000000000000000007", 4096, 1200, 3, 1024, 140, value_crc(b"k7", b"\x07" * 1024))
    ),
    "pointer_journal_v2.bin": lambda: encode_pointer(
        ranged_pointer(ULID, golden("journal.journal"), 0, 140, 0, 11)
    ),
    "terms.bin": lambda: encode_terms(TERMS),
    "index_key.bin": lambda: index_key("dest", b"L\x00X", b"k1"),
    "journal.journal": build_journal,
}


def golden(name: str) -> bytes:
    return (GOLDEN / name).read_bytes()


@pytest.mark.parametrize("name", sorted(GOLDENS))
def test_encoder_reproduces_golden_bytes(name: str) -> None:
    fresh = GOLDENS[name]()
    path = GOLDEN / name
    if REGEN:
        GOLDEN.mkdir(exist_ok=True)
        path.write_bytes(fresh)
        pytest.skip(f"regenerated {path}")
    assert path.read_bytes() == fresh, f"{name}: the encoding changed (a format change needs a version bump)"


def test_golden_bytes_decode() -> None:
    assert decode_pointer(golden("pointer_wal.bin")) == Pointer("00000000000000000007", 4096, 1200, 3, 1024)
    assert decode_pointer(golden("pointer_journal.bin")) == Pointer(ULID, 0, 140, 0, 11)
    v2 = decode_pointer(golden("pointer_wal_v2.bin"))
    assert v2 == Pointer("00000000000000000007", 4096, 1200, 3, 1024, 140, value_crc(b"k7", b"\x07" * 1024))
    assert decode_terms(golden("terms.bin")) == TERMS
    assert decode_index_key(golden("index_key.bin")) == ("dest", b"L\x00X", b"k1")
    meta, blocks = decode_sst(golden("journal.journal"))
    assert meta.props.kind == SST_JOURNAL
    rows = [(b.keys[i], b.seqs[i], b.kinds[i], b.payload(i)) for b in blocks for i in range(len(b))]
    assert rows == journal_rows()
    body, md, exp, raw = decode_extras(rows[0][2], rows[0][3])
    assert (body, md, exp, decode_terms(raw or b"")) == (b"value of k1", b"md", 1_700_000_060_000, TERMS)


def test_the_journal_pointer_example_points_at_k1() -> None:
    """``pointer_journal.bin`` addresses entry 0 of block 0 of ``journal.journal``."""
    from shaledb.format.sst import decode_data_block

    p = decode_pointer(golden("pointer_journal.bin"))
    data = golden("journal.journal")
    blk = decode_data_block(data[p.block_off : p.block_off + p.block_len])
    assert blk.keys[p.index] == b"k1"
    assert decode_extras(blk.kinds[p.index], blk.payload(p.index))[0] == b"value of k1"


def test_the_version_2_pointer_example_addresses_k1s_bytes() -> None:
    """``pointer_journal_v2.bin`` is ``pointer_journal.bin`` plus the range of k1's value
    (after its extras) in the block, and the CRC32C of key and value."""
    p1 = decode_pointer(golden("pointer_journal.bin"))
    p = decode_pointer(golden("pointer_journal_v2.bin"))
    assert replace(p, value_off=None, value_crc=0) == p1  # version 1's fields, the same
    assert p.value_off is not None
    data = golden("journal.journal")
    start = p.block_off + p.value_off
    assert data[start : start + p.value_len] == b"value of k1"
    assert p.value_crc == value_crc(b"k1", b"value of k1") != value_crc(b"k2", b"value of k1")


# ------------------------------------------------------------ doc examples


def _fields_pointer(buf: bytes) -> list[Field]:
    c = _Cursor(buf)
    c.u("<B", "version")
    kind = c.u("<B", "ref kind (0 WAL object, 1 journal object)")
    if kind == 0:
        c.u("<Q", "WAL id")
    else:
        c.take(16, lambda b: f"ULID = {decode_pointer(buf).ref} (128 bits, big-endian)")
    c.u("<Q", "block_off")
    c.u("<I", "block_len")
    c.u("<I", "index")
    c.u("<I", "value_len")
    if buf[0] == 2:
        c.u("<I", "value_off (from block_off)")
        c.u("<I", "value_crc (CRC32C of key, then value)")
    return c.done()


def _fields_terms(buf: bytes) -> list[Field]:
    c = _Cursor(buf)
    nf = c.u("<H", "nfields")
    for _ in range(nf):
        ln = c.u("<H", "name_len")
        c.take(ln, lambda b: f"name = {b.decode()!r}")
        nt = c.u("<I", "nterms")
        for _ in range(nt):
            tl = c.u("<H", "term_len")
            c.take(tl, lambda b: f"term = {b!r}")
    return c.done()


def _fields_index_key(buf: bytes) -> list[Field]:
    c = _Cursor(buf)
    for what in ("field", "term", "key"):
        c.take(1, f"0x01: {what} element")
        end = buf.index(b"\x00", c.pos)
        while end + 1 < len(buf) and buf[end + 1] == 0xFF:
            end = buf.index(b"\x00", end + 2)
        c.take(end - c.pos, lambda b, w=what: f"{w} bytes, NUL as 00 ff = {b!r}")
        c.take(1, "0x00: end of element")
    return c.done()


DOC_DUMPS: dict[str, Callable[[], str]] = {
    "journal_object": lambda: render(fields_sst(golden("journal.journal"))),
    "pointer_wal": lambda: render(_fields_pointer(golden("pointer_wal.bin"))),
    "pointer_journal": lambda: render(_fields_pointer(golden("pointer_journal.bin"))),
    "pointer_wal_v2": lambda: render(_fields_pointer(golden("pointer_wal_v2.bin"))),
    "pointer_journal_v2": lambda: render(_fields_pointer(golden("pointer_journal_v2.bin"))),
    "terms": lambda: render(_fields_terms(golden("terms.bin"))),
    "index_key": lambda: render(_fields_index_key(golden("index_key.bin"))),
}
WALKS: dict[str, Callable[[bytes], list[Field]]] = {
    "journal.journal": fields_sst,
    "pointer_wal.bin": _fields_pointer,
    "pointer_journal.bin": _fields_pointer,
    "pointer_wal_v2.bin": _fields_pointer,
    "pointer_journal_v2.bin": _fields_pointer,
    "terms.bin": _fields_terms,
    "index_key.bin": _fields_index_key,
}


@pytest.mark.parametrize("name", sorted(WALKS))
def test_spec_walk_accounts_for_every_byte(name: str) -> None:
    data = golden(name)
    check_fields(data, WALKS[name](data))


def test_doc_has_the_required_sections_and_real_bytes() -> None:
    text = DOC.read_text()
    assert "## Versioning" in text and "\n+--" in text and "| Field | Type | Meaning" in text
    found = MARKER.findall(text)
    assert {m for m, _ in found} == set(DOC_DUMPS)
    if REGEN:
        DOC.write_text(
            MARKER.sub(lambda m: f"<!-- golden:{m[1]} -->\n```text\n{DOC_DUMPS[m[1]]()}\n```\n", text)
        )
        return
    for name, shown in found:
        assert shown == DOC_DUMPS[name]() + "\n", (
            f"the {name!r} example differs from the bytes the code writes"
        )


# ---------------------------------------------------------- untrusted bytes

KEYS = st.binary(max_size=12)


@fuzz(300)
@given(raw=st.binary(max_size=48))
def test_pointer_decoder_raises_only_corruption(raw: bytes) -> None:
    try:
        p = decode_pointer(raw)
    except CorruptionError:
        return
    assert len(raw) in (POINTER_SIZE_WAL, POINTER_SIZE_JOURNAL, POINTER_V2_SIZE_WAL, POINTER_V2_SIZE_JOURNAL)
    assert encode_pointer(p) == raw


@fuzz(300)
@given(raw=st.binary(max_size=64))
def test_terms_and_index_key_decoders_raise_only_corruption(raw: bytes) -> None:
    for fn in (decode_terms, decode_index_key):
        try:
            fn(raw)
        except CorruptionError:
            pass


@fuzz(300)
@given(a=st.tuples(KEYS, KEYS), b=st.tuples(KEYS, KEYS))
def test_index_keys_sort_as_tuples(a: tuple[bytes, bytes], b: tuple[bytes, bytes]) -> None:
    ka, kb = index_key("f", *a), index_key("f", *b)
    assert (ka < kb) == (a < b) and (ka == kb) == (a == b)
    assert decode_index_key(ka) == ("f", *a)


@fuzz(200)
@given(
    terms=st.dictionaries(
        st.text(min_size=1, max_size=5).filter(lambda t: "\x00" not in t),
        st.lists(st.binary(min_size=1, max_size=8), max_size=3).map(lambda ts: tuple(sorted(set(ts)))),
        max_size=3,
    )
)
def test_terms_round_trip(terms: dict[str, tuple[bytes, ...]]) -> None:
    assert decode_terms(encode_terms(terms)) == terms


@fuzz(200)
@given(
    rows=st.lists(
        st.tuples(st.binary(min_size=1, max_size=6), st.integers(0, 2), st.binary(max_size=200)), max_size=30
    ),
    bs=st.sampled_from([64, 256, 4096]),
    codec=st.sampled_from([0, 2]),
)
def test_block_heads_and_located_values_match_the_blocks(
    rows: list[tuple[bytes, int, bytes]], bs: int, codec: int
) -> None:
    """The scoring's block-head parser and the WAL's value locations agree with full decoding."""
    from shaledb.format.sst import decode_data_block
    from shaledb.format.wal import encode_wal_layout

    keys = [r[0] for r in rows]
    ents = [
        (1 + i // 3, KIND_VALUE if r[1] else KIND_TOMBSTONE, r[2] if r[1] else b"")
        for i, r in enumerate(rows)
    ]
    data, offsets, ends = encode_wal_layout(
        keys, ents, epoch=1, nonce=NONCE, created_at_ms=0, codec=codec, block_size=bs
    )
    sink: dict[bytes, tuple[int, bytes, int]] = {}
    locate_values(9, keys, ents, offsets, ends, 32, sink)
    for b in range(len(ends)):
        stored = data[offsets[b] : offsets[b + 1]]
        if stored[-5]:
            continue  # stored compressed: the head parser reads raw blocks only
        head = block_head(stored)
        blk = decode_data_block(stored)
        assert not isinstance(head, int)
        assert head[0] == list(blk.keys) and head[1] == blk.seqs.tolist() and head[2] == bytes(blk.kinds)
        assert head[3] == [len(blk.payload(i)) for i in range(len(blk))]
    newest: dict[bytes, tuple[int, int, bytes]] = {}
    for k, e in zip(keys, ents):
        newest[k] = e
    for k, (seq, ptr, vlen) in sink.items():
        p = decode_pointer(ptr)
        blk = decode_data_block(data[p.block_off : p.block_off + p.block_len])
        assert blk.keys[p.index] == k and blk.seqs[p.index] == seq == newest[k][0]
        assert blk.payload(p.index) == newest[k][2] and vlen == len(newest[k][2]) >= 32
    assert set(sink) == {k for k, e in newest.items() if e[1] == KIND_VALUE and len(e[2]) >= 32}
    # Given the object's bytes: version 2 pointers into blocks stored raw, the same
    # entries, and the range holds the value (ranged_pointer, from the bytes alone, agrees).
    ranged: dict[bytes, tuple[int, bytes, int]] = {}
    locate_values(9, keys, ents, offsets, ends, 32, ranged, data)
    assert set(ranged) == set(sink)
    for k, (_seq, ptr, vlen) in ranged.items():
        p1, p = decode_pointer(sink[k][1]), decode_pointer(ptr)
        assert replace(p, value_off=None, value_crc=0) == p1  # version 1's fields, the same
        raw_block = data[p.block_off + p.block_len - 5] == 0
        assert (p.value_off is not None) == raw_block
        assert decode_pointer(encode_pointer(p)) == p
        assert ranged_pointer(p.ref, data, p.block_off, p.block_len, p.index, vlen) == p
        if p.value_off is not None:
            start = p.block_off + p.value_off
            assert bytes(data[start : start + vlen]) == newest[k][2]
            assert p.value_crc == value_crc(k, newest[k][2])


def test_pointer_entries_carry_their_extras() -> None:
    flags, payload = encode_payload(b"x" * 100, b"meta", 5, encode_terms({"f": (b"t",)}))
    ptr = encode_pointer(Pointer("00000000000000000001", 0, 10, 0, 100))
    stored = payload[: len(payload) - 100] + ptr
    body, md, exp, raw = decode_extras(KIND_POINTER | flags, stored)
    assert (body, md, exp, decode_terms(raw or b"")) == (ptr, b"meta", 5, {"f": (b"t",)})


def test_damaged_pointers_name_their_problem() -> None:
    good = golden("pointer_wal.bin")
    with pytest.raises(CorruptionError, match="version"):
        decode_pointer(b"\x03" + good[1:])
    with pytest.raises(CorruptionError, match="bytes"):
        decode_pointer(b"\x02" + good[1:])  # a version 1 body under version 2
    v2 = golden("pointer_wal_v2.bin")
    with pytest.raises(CorruptionError, match="leaves"):
        decode_pointer(v2[:-8] + struct.pack("<II", 1200 - 1023, 0))  # the range overruns the block
    with pytest.raises(CorruptionError, match="kind"):
        decode_pointer(good[:1] + b"\x07" + good[2:])
    with pytest.raises(CorruptionError, match="bytes"):
        decode_pointer(good[:-1])
    assert struct.unpack_from("<Q", good, 2)[0] == 7
