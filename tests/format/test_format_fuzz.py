"""Decoder fuzzing (reliability G11): only CorruptionError may escape, quickly.

Two kinds of input for every decoder:

* raw ``binary()``, which mostly exercises the first checks (lengths, magic,
  checksums);
* mutations of valid encodings (bit flips, truncation, extension, inserted
  and deleted bytes, length and offset fields set to edge values or nudged).
  Where a checksum would catch the mutation, the test recomputes it
  (re-framing a block, re-sealing a footer or manifest envelope), so the
  bytes are *structurally* damaged but checksum-valid and the structural
  validation behind the checksum is what gets tested.

Each input must finish within hypothesis' 1 s deadline. The seed is printed
with any failure (``conftest.py``); ``SHALEDB_FUZZ_EXAMPLES=10000`` runs the
G11 pull-request volume.
"""

from __future__ import annotations

import json
import math
import struct
import tracemalloc
from dataclasses import dataclass, replace
from typing import Any

import pytest
import zstandard
from format_testkit import block_payload, bloom_keys, framed_manifest, fuzz, golden_bytes, many_rows, wal_rows
from hypothesis import assume, given
from hypothesis import strategies as st

from shaledb.errors import CorruptionError
from shaledb.format.block import decode_block, encode_block
from shaledb.format.bloom import BloomFilter
from shaledb.format.coding import (
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_ZSTD,
    TRAILER,
    TRAILER_SIZE,
    crc32c,
    frame_block,
    unframe_block,
)
from shaledb.format.manifest import decode_manifest_body, encode_manifest_body
from shaledb.format.row import decode_extras, decode_payload, encode_payload
from shaledb.format.sst import (
    FOOTER_SIZE,
    Footer,
    decode_index,
    decode_meta,
    decode_props,
    decode_sst,
    encode_footer,
    encode_index,
    parse_footer,
)
from shaledb.manifest.model import Manifest, from_body, to_body

# ------------------------------------------------------------- mutations

EDGE_VALUES = [0, 1, 2, 3, 4, 7, 8, 16, 0x7F, 0x80, 0xFF, 0x100, 0xFFFF, 0x10000, 2**24, 2**30]
EDGE_VALUES += [2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63, 2**64 - 1]
OPS = ["flip", "byte", "truncate", "chop_head", "extend", "insert", "delete", "u32", "u64", "nudge", "copy"]


@st.composite
def mutations(draw: st.DrawFn, data: bytes, max_ops: int = 3) -> bytes:
    """``data`` after 1..max_ops random edits (see OPS)."""
    buf = bytearray(data)
    for _ in range(draw(st.integers(1, max_ops))):
        op = draw(st.sampled_from(OPS))
        n = len(buf)
        if op == "flip" and n:
            bit = draw(st.integers(0, 8 * n - 1))
            buf[bit // 8] ^= 1 << (bit % 8)
        elif op == "byte" and n:
            buf[draw(st.integers(0, n - 1))] = draw(st.integers(0, 255))
        elif op == "truncate":
            del buf[draw(st.integers(0, n)) :]
        elif op == "chop_head":
            del buf[: draw(st.integers(0, n))]
        elif op == "extend":
            buf += draw(st.binary(min_size=1, max_size=64))
        elif op == "insert":
            i = draw(st.integers(0, n))
            buf[i:i] = draw(st.binary(min_size=1, max_size=16))
        elif op == "delete" and n:
            i = draw(st.integers(0, n - 1))
            del buf[i : i + draw(st.integers(1, 16))]
        elif op in ("u32", "u64", "nudge"):
            width = 8 if op == "u64" or (op == "nudge" and draw(st.booleans())) else 4
            if n < width:
                continue
            i = draw(st.integers(0, n - width))
            if draw(st.booleans()):
                i -= i % 4  # length and offset fields are 4-aligned in most layouts
            old = int.from_bytes(buf[i : i + width], "little")
            if op == "nudge":
                v = old + draw(st.integers(-16, 16))
            else:
                v = draw(st.sampled_from(EDGE_VALUES) | st.integers(0, 2 ** (8 * width) - 1))
            buf[i : i + width] = (v % 2 ** (8 * width)).to_bytes(width, "little")
        elif op == "copy" and n:
            i = draw(st.integers(0, n - 1))
            chunk = bytes(buf[i : i + draw(st.integers(1, 64))])
            j = draw(st.integers(0, n - 1))
            buf[j : j + len(chunk)] = chunk
    return bytes(buf)


def reframe(body: bytes, raw_len: int, codec: int) -> bytes:
    """A stored block with any trailer values and a *valid* checksum."""
    head = body + struct.pack("<IB", raw_len, codec)
    return head + struct.pack("<I", crc32c(head))


def corruption_or(fn: Any, *args: Any) -> Any:
    """``fn(*args)``, or None if it raised CorruptionError; anything else propagates."""
    try:
        return fn(*args)
    except CorruptionError:
        return None


# --------------------------------------------------------- valid sources

SST_NAMES = ["table_small.sst", "table_none.sst", "table_lz4.sst", "table_zstd.sst", "wal.sst", "fence.sst"]
SSTS = {n: golden_bytes(n) for n in SST_NAMES}
BLOCK_PAYLOADS = [
    golden_bytes("block_payload.bin"),
    block_payload(wal_rows()),
    block_payload(many_rows(8)),
    encode_block([], [], b"", []),
]
FRAMES = [golden_bytes(n) for n in ("frame_none.bin", "frame_lz4.bin", "frame_zstd.bin")]
FRAMES += [frame_block(p, c) for p in BLOCK_PAYLOADS[:3] for c in (CODEC_LZ4, CODEC_ZSTD)]
MANIFESTS = [golden_bytes("manifest_small.manifest"), golden_bytes("manifest_full.manifest")]


@dataclass(frozen=True)
class SstParts:
    """A valid SST split into stored blocks, to be damaged and reassembled."""

    blocks: list[bytes]
    filter: bytes | None
    index: bytes
    props: bytes
    footer: Footer


def split_sst(data: bytes) -> SstParts:
    f = parse_footer(data, len(data))
    meta = decode_meta(data, len(data))
    offs = meta.index.offsets
    return SstParts(
        blocks=[data[offs[i] : offs[i + 1]] for i in range(len(meta.index))],
        filter=data[f.filter_off : f.filter_off + f.filter_len] if f.filter_len else None,
        index=data[f.index_off : f.index_off + f.index_len],
        props=data[f.props_off : f.props_off + f.props_len],
        footer=f,
    )


def assemble(p: SstParts, *, reindex: bool, index_keys: list[bytes] | None = None) -> bytes:
    """Concatenate the parts with a footer (and, if ``reindex``, an index) that fit them."""
    data = b"".join(p.blocks)
    index = p.index
    if reindex:
        offsets = [0]
        for b in p.blocks:
            offsets.append(offsets[-1] + len(b))
        keys = index_keys if index_keys is not None else [b"k"] * len(p.blocks)
        index = frame_block(encode_index(offsets, keys), CODEC_NONE)
    pos = len(data)
    filter_off, filter_len = (pos, len(p.filter)) if p.filter else (0, 0)
    pos += filter_len
    footer = Footer(pos, len(index), filter_off, filter_len, pos + len(index), len(p.props), p.footer.version)
    return data + (p.filter or b"") + index + p.props + encode_footer(footer)


def check_sst(data: bytes) -> Any:
    """Decode a whole object; if it is accepted, what came out must be self-consistent.

    Returns the properties and all entries, or None if the object was rejected.
    """
    res = corruption_or(decode_sst, data)
    if res is None:
        return None
    meta, blocks = res
    assert sum(len(b) for b in blocks) == meta.props.entries
    assert len(blocks) == len(meta.index)
    for b in blocks:
        assert len(b.keys) == len(b.seqs) == len(b.kinds) == len(b.val_off) - 1
        b.payloads(0, len(b))
    if meta.bloom is not None:
        for k in bloom_keys():
            meta.bloom.may_contain_key(k)
    return meta.props, [
        (b.keys[i], b.seqs[i], b.kinds[i], b.payload(i)) for b in blocks for i in range(len(b))
    ]


# ------------------------------------------------------------ raw binary

RAW_DECODERS: dict[str, Any] = {
    "block": lambda raw, x: decode_block(raw),
    "bloom": lambda raw, x: BloomFilter(raw),
    "index": decode_index,
    "props": lambda raw, x: decode_props(raw),
    "footer": lambda raw, x: parse_footer(raw, len(raw) + x),  # the tail of a larger object
    "meta": lambda raw, x: decode_meta(raw, len(raw)),
    "sst": lambda raw, x: check_sst(raw),
    "frame": lambda raw, x: unframe_block(raw),
    "manifest": lambda raw, x: from_body(decode_manifest_body(raw)),
    "payload": lambda raw, x: decode_payload(x & 0xFF, raw),
}


@pytest.mark.parametrize("decoder", sorted(RAW_DECODERS))
@fuzz(300)
@given(raw=st.binary(max_size=600), extra=st.integers(0, 1 << 20))
def test_raw_bytes_raise_only_corruption(decoder: str, raw: bytes, extra: int) -> None:
    corruption_or(RAW_DECODERS[decoder], raw, extra)


# ------------------------------------------------- stored-block framing

RAW_LENS = (
    st.sampled_from([v for v in EDGE_VALUES if v < 2**32]) | st.integers(0, 2**32 - 1) | st.integers(0, 512)
)
CODEC_BYTES = st.sampled_from([CODEC_NONE, CODEC_LZ4, CODEC_ZSTD]) | st.integers(0, 255)


@fuzz(600)
@given(body=st.binary(max_size=300), raw_len=RAW_LENS, codec=CODEC_BYTES)
def test_checksum_valid_frames_with_garbage_bodies(body: bytes, raw_len: int, codec: int) -> None:
    out = corruption_or(unframe_block, reframe(body, raw_len, codec))
    if out is not None:
        assert len(out) == raw_len


@fuzz(600)
@given(data=st.data(), src=st.integers(0, len(FRAMES) - 1), mode=st.sampled_from(["body", "trailer", "both"]))
def test_checksum_valid_frames_with_damaged_contents(data: st.DataObject, src: int, mode: str) -> None:
    stored = FRAMES[src]
    body = stored[:-TRAILER_SIZE]
    raw_len, codec, _ = TRAILER.unpack_from(stored, len(stored) - TRAILER_SIZE)
    original = unframe_block(stored)
    if mode in ("body", "both"):
        body = data.draw(mutations(body))
    if mode in ("trailer", "both"):
        raw_len = data.draw(RAW_LENS)
        codec = data.draw(CODEC_BYTES)
    out = corruption_or(unframe_block, reframe(body, raw_len, codec))
    if out is not None:
        assert len(out) == raw_len
        if body == stored[:-TRAILER_SIZE] and codec == TRAILER.unpack_from(stored, len(stored) - 9)[1]:
            assert out == original


def test_zstd_frame_larger_than_raw_len_is_rejected_before_decompressing() -> None:
    """``raw_len`` bounds decompression: a frame that declares more is not inflated.

    zstd sizes its output from the frame header, not from ``max_output_size``,
    so a checksum-valid block whose ~2 KiB frame inflates to 32 MiB must be
    refused from the header alone.
    """
    frame = zstandard.ZstdCompressor().compress(bytes(32 << 20))
    assert len(frame) < 8192 and zstandard.frame_content_size(frame) == 32 << 20
    stored = reframe(frame, 1000, CODEC_ZSTD)
    tracemalloc.start()
    try:
        with pytest.raises(CorruptionError):
            unframe_block(stored)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, f"decoding allocated {peak} bytes"


def test_zstd_frame_smaller_than_raw_len_is_rejected() -> None:
    frame = zstandard.ZstdCompressor().compress(b"a" * 100)
    with pytest.raises(CorruptionError):
        unframe_block(reframe(frame, 101, CODEC_ZSTD))
    assert unframe_block(reframe(frame, 100, CODEC_ZSTD)) == b"a" * 100


# ---------------------------------------------- block, filter, index, props


@fuzz(800)
@given(data=st.data(), src=st.integers(0, len(BLOCK_PAYLOADS) - 1))
def test_mutated_block_payloads(data: st.DataObject, src: int) -> None:
    blk = corruption_or(decode_block, data.draw(mutations(BLOCK_PAYLOADS[src], max_ops=4)))
    if blk is not None:
        n = len(blk)
        assert len(blk.seqs) == len(blk.kinds) == n and len(blk.val_off) == n + 1
        assert sum(map(len, blk.payloads(0, n))) == len(blk.vals)


@fuzz(300)
@given(data=st.data())
def test_mutated_bloom_filters(data: st.DataObject) -> None:
    f = corruption_or(BloomFilter, data.draw(mutations(golden_bytes("bloom.bin"))))
    if f is not None:
        assert len(f.bits) == 6 + 64 * f.num_blocks
        for k in bloom_keys():
            f.may_contain_key(k)


def _meta_payloads(what: str) -> list[tuple[bytes, int]]:
    out = []
    for data in SSTS.values():
        p = split_sst(data)
        stored = {"index": p.index, "props": p.props}[what]
        out.append((unframe_block(stored), p.footer.meta_start))
    return out


INDEXES = _meta_payloads("index")
PROPS = _meta_payloads("props")


@fuzz(500)
@given(data=st.data(), src=st.integers(0, len(INDEXES) - 1), shift=st.integers(-2, 2))
def test_mutated_indexes(data: st.DataObject, src: int, shift: int) -> None:
    payload, data_end = INDEXES[src]
    index = corruption_or(decode_index, data.draw(mutations(payload, max_ops=4)), max(0, data_end + shift))
    if index is not None:
        assert len(index.offsets) == len(index.keys) + 1
        assert index.offsets[-1] == max(0, data_end + shift)


@fuzz(400)
@given(data=st.data(), src=st.integers(0, len(PROPS) - 1))
def test_mutated_props(data: st.DataObject, src: int) -> None:
    corruption_or(decode_props, data.draw(mutations(PROPS[src][0])))


# ----------------------------------------------------------- whole SSTs


@fuzz(500)
@given(data=st.data(), name=st.sampled_from(SST_NAMES))
def test_mutated_ssts_without_fixups(data: st.DataObject, name: str) -> None:
    """No checksum is recomputed, so damage is either detected or changed nothing."""
    decoded = check_sst(data.draw(mutations(SSTS[name])))
    assert decoded is None or decoded == check_sst(SSTS[name]), "damaged SST decoded to different data"


FOOTER_FIELDS = ["index_off", "index_len", "filter_off", "filter_len", "props_off", "props_len", "version"]


@fuzz(500)
@given(
    name=st.sampled_from(SST_NAMES),
    edits=st.lists(
        st.tuples(
            st.sampled_from(FOOTER_FIELDS), st.booleans(), st.sampled_from(EDGE_VALUES) | st.integers(-64, 64)
        ),
        min_size=1,
        max_size=3,
    ),
)
def test_resealed_footers_with_edited_fields(name: str, edits: list[tuple[str, bool, int]]) -> None:
    data = SSTS[name]
    footer = parse_footer(data, len(data))
    for field, nudge, value in edits:
        limit = 2**16 if field == "version" else 2**32 if field.endswith("_len") else 2**64
        new = getattr(footer, field) + value if nudge else value
        footer = replace(footer, **{field: new % limit})
    resealed = data[:-FOOTER_SIZE] + encode_footer(footer)
    corruption_or(parse_footer, resealed, len(resealed))
    check_sst(resealed)


@fuzz(800)
@given(
    data=st.data(),
    name=st.sampled_from(SST_NAMES),
    part=st.sampled_from(["block", "filter", "index", "props"]),
    codec=st.sampled_from([CODEC_NONE, CODEC_LZ4, CODEC_ZSTD]),
    reindex=st.booleans(),
)
def test_reframed_sst_parts_with_damaged_payloads(
    data: st.DataObject, name: str, part: str, codec: int, reindex: bool
) -> None:
    """Damage one block's payload, re-frame it (valid CRC) and reassemble the object."""
    p = split_sst(SSTS[name])
    keys = decode_meta(SSTS[name], len(SSTS[name])).index.keys
    if part == "block":
        assume(p.blocks)
        i = data.draw(st.integers(0, len(p.blocks) - 1))
        blocks = list(p.blocks)
        blocks[i] = frame_block(data.draw(mutations(unframe_block(blocks[i]))), codec)
        p = replace(p, blocks=blocks)
    elif part == "filter":
        assume(p.filter is not None)
        p = replace(p, filter=frame_block(data.draw(mutations(unframe_block(p.filter or b""))), codec))
    elif part == "index":
        p = replace(p, index=frame_block(data.draw(mutations(unframe_block(p.index))), codec))
        reindex = False
    else:
        p = replace(p, props=frame_block(data.draw(mutations(unframe_block(p.props))), codec))
    check_sst(assemble(p, reindex=reindex, index_keys=keys))


@fuzz(300)
@given(data=st.data(), name=st.sampled_from(SST_NAMES))
def test_reassembled_ssts_with_blocks_dropped_duplicated_or_swapped(data: st.DataObject, name: str) -> None:
    """Whole stored blocks (each with a valid CRC) in the wrong place or number."""
    p = split_sst(SSTS[name])
    blocks = list(p.blocks)
    op = data.draw(st.sampled_from(["drop", "dup", "swap", "foreign"]))
    if op == "drop" and blocks:
        del blocks[data.draw(st.integers(0, len(blocks) - 1))]
    elif op == "dup" and blocks:
        i = data.draw(st.integers(0, len(blocks) - 1))
        blocks.insert(i, blocks[i])
    elif op == "swap" and len(blocks) > 1:
        i = data.draw(st.integers(0, len(blocks) - 2))
        blocks[i], blocks[i + 1] = blocks[i + 1], blocks[i]
    else:
        other = split_sst(SSTS[data.draw(st.sampled_from(SST_NAMES))])
        blocks.append(other.props if data.draw(st.booleans()) else other.index)
    keys = [b"k"] * len(blocks)
    check_sst(assemble(replace(p, blocks=blocks), reindex=data.draw(st.booleans()), index_keys=keys))


# ------------------------------------------------------------- manifests


def reseal(buf: bytes) -> bytes:
    """Fix body_len and the CRC so the envelope's checksum passes."""
    b = bytearray(buf)
    if len(b) >= 16:
        b[8:12] = struct.pack("<I", len(b) - 16)
        b[-4:] = struct.pack("<I", crc32c(bytes(b[:-4])))
    return bytes(b)


def check_manifest(data: bytes) -> Manifest | None:
    """Decode; an accepted manifest must survive a re-encode unchanged."""
    m: Manifest | None = corruption_or(lambda d: from_body(decode_manifest_body(d)), data)
    if m is not None:
        again = from_body(decode_manifest_body(encode_manifest_body(to_body(m, nonce="n", author="a"))))
        assert again == m
    return m


@fuzz(500)
@given(data=st.data(), src=st.integers(0, len(MANIFESTS) - 1), fix=st.booleans())
def test_mutated_manifest_envelopes(data: st.DataObject, src: int, fix: bool) -> None:
    mutated = data.draw(mutations(MANIFESTS[src]))
    m = check_manifest(reseal(mutated) if fix else mutated)
    if not fix:  # no checksum recomputed: damage is detected or changed nothing
        assert m is None or m == from_body(decode_manifest_body(MANIFESTS[src]))


@fuzz(500)
@given(data=st.data(), src=st.integers(0, len(MANIFESTS) - 1))
def test_mutated_manifest_json_text(data: st.DataObject, src: int) -> None:
    body = MANIFESTS[src][12:-4]
    check_manifest(reseal(MANIFESTS[src][:12] + data.draw(mutations(body, max_ops=2)) + bytes(4)))


_ULID = "01HF0000000000000000000009"
_UUID = "12345678-1234-5678-1234-567812345678"
JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([-1, 0, 1, 2**63, 2**64 - 1, 2**64, 10**400, -(10**400)])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=16)
    | st.sampled_from(["", "00ff", "0g", "ab cd", _ULID, _ULID.lower(), _UUID, "{" + _UUID + "}", "../x"])
)
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=12), kids, max_size=4),
    max_leaves=12,
)


def _paths(v: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(v, dict):
        for k, x in v.items():
            out += _paths(x, (*prefix, k))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            out += _paths(x, (*prefix, i))
    return out


FULL_BODY = decode_manifest_body(golden_bytes("manifest_full.manifest"))
FULL_PATHS = _paths(FULL_BODY)


@fuzz(1000)
@given(
    edits=st.lists(
        st.tuples(st.sampled_from(FULL_PATHS), st.sampled_from(["set", "delete", "add"]), JSON_VALUES),
        min_size=1,
        max_size=3,
    )
)
def test_manifest_bodies_with_fields_replaced(edits: list[tuple[tuple[Any, ...], str, Any]]) -> None:
    """Schema validation: any field replaced, removed or joined by a stranger."""
    body = json.loads(json.dumps(FULL_BODY))
    for path, op, value in edits:
        parent: Any = body
        try:
            for step in path[:-1]:
                parent = parent[step]
            last = str(path[-1]) if isinstance(parent, dict) else path[-1]  # JSON keys are strings
            if op == "set":
                parent[last] = value
            elif op == "delete":
                del parent[last]
            elif isinstance(parent, dict):
                parent["zz_" + str(last)] = value
            else:
                parent.append(value)
        except (KeyError, IndexError, TypeError, AttributeError):
            continue  # an earlier edit removed or replaced this path
    check_manifest(framed_manifest(body))  # (NaN and Infinity too: what a tampering writes)


@pytest.mark.parametrize("field", ["destroyed_at_s", "create_time_s", "expire_time_s"])
@pytest.mark.parametrize(
    "value",
    [10**400, -(10**400), math.inf, math.nan, -1, "1", True],
    ids=["1e400", "-1e400", "inf", "nan", "-1", "str", "bool"],
)
def test_manifest_times_must_be_finite_non_negative_numbers(field: str, value: Any) -> None:
    body = json.loads(json.dumps(FULL_BODY))
    target = body if field == "destroyed_at_s" else body["checkpoints"][0]
    target[field] = value
    with pytest.raises(CorruptionError):
        from_body(decode_manifest_body(framed_manifest(body)))


# ------------------------------------------------------- entry payloads


@fuzz(500)
@given(
    data=st.data(),
    body=st.binary(max_size=32),
    meta=st.none() | st.binary(max_size=32),
    expires=st.none() | st.integers(0, 2**64 - 1),
    kind=st.integers(0, 255),
)
def test_mutated_entry_payloads(
    data: st.DataObject, body: bytes, meta: bytes | None, expires: int | None, kind: int
) -> None:
    _, payload = encode_payload(body, meta, expires)
    damaged = data.draw(mutations(payload))
    out = corruption_or(decode_extras, kind, damaged)
    if out is not None:
        b, m, e, t = out
        extras = (0 if m is None else 4 + len(m)) + (0 if e is None else 8) + (0 if t is None else 4 + len(t))
        assert extras + len(b) == len(damaged), "decoded parts must add up to the payload"
        assert corruption_or(decode_payload, kind, damaged) == (b, m, e)


def test_entry_payload_length_edits() -> None:
    flags, payload = encode_payload(b"v", b"meta", 5)
    assert decode_payload(flags, payload) == (b"v", b"meta", 5)
    for mlen in (6, 2**32 - 1):  # 4 + 6 + 8 > 17 bytes
        with pytest.raises(CorruptionError):
            decode_payload(flags, struct.pack("<I", mlen) + payload[4:])
    with pytest.raises(CorruptionError):
        decode_payload(flags, payload[:3])
