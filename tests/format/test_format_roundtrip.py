"""Round-trip properties of the encoders: decode(encode(x)) == x, for random x.

Also the invariants readers rely on: the index finds every key's newest
version, the bloom filter never says no to a key that was added, a WAL block
never splits a write batch, and the properties block describes the data.
"""

from __future__ import annotations

import struct
import uuid
from itertools import pairwise
from typing import Any

import pytest
from format_testkit import Row, fuzz
from hypothesis import given
from hypothesis import strategies as st

from shaledb.format.block import decode_block, encode_block
from shaledb.format.bloom import BloomFilter, build_filter, key_hash, probes_for
from shaledb.format.coding import (
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_ZSTD,
    TRAILER,
    crc32c,
    crc32c_extend_view,
    frame_block,
    unframe_block,
)
from shaledb.format.manifest import decode_manifest_body, encode_manifest_body
from shaledb.format.row import (
    EXTRA_FLAGS,
    FLAG_EXPIRY,
    FLAG_INDEXED,
    FLAG_META,
    KIND_TOMBSTONE,
    TYPE_MASK,
    decode_payload,
    encode_payload,
)
from shaledb.format.sst import SST_TABLE, SST_WAL, SstBuilder, decode_sst
from shaledb.manifest import model
from shaledb.manifest.model import (
    Checkpoint,
    ExternalDb,
    JournalFile,
    Manifest,
    ParentRef,
    SortedRun,
    SstInfo,
    TrackedWal,
    Tree,
    from_body,
    to_body,
)

CODECS = st.sampled_from([CODEC_NONE, CODEC_LZ4, CODEC_ZSTD])
U64 = st.integers(0, 2**64 - 1)
# Mostly small, repetitive values (so compression kicks in), sometimes random bytes.
VALUES = st.one_of(
    st.binary(max_size=64),
    st.builds(lambda c, n: c * n, st.binary(min_size=1, max_size=3), st.integers(0, 200)),
)


@st.composite
def entries(draw: st.DrawFn, key: bytes | None = None) -> tuple[bytes, int, bytes]:
    """``(key, kind, payload)`` with a random entry type, flags and extras."""
    k = key if key is not None else draw(st.binary(max_size=24))
    base = draw(st.sampled_from([0, 1, 2]))
    body = b"" if base == KIND_TOMBSTONE and draw(st.booleans()) else draw(VALUES)
    meta = draw(st.none() | st.binary(max_size=16))
    expires = draw(st.none() | U64)
    flags, payload = encode_payload(body, meta, expires)
    if draw(st.booleans()):
        flags |= FLAG_INDEXED
    return k, base | flags, payload


@st.composite
def table_rows(draw: st.DrawFn) -> list[Row]:
    """Sorted keys, each with 1-3 versions, newest (highest seq) first."""
    keys = sorted(draw(st.sets(st.binary(max_size=16), max_size=40)))
    rows: list[Row] = []
    for k in keys:
        seqs = sorted(draw(st.sets(U64, min_size=1, max_size=3)), reverse=True)
        for s in seqs:
            _, kind, payload = draw(entries(k))
            rows.append((k, s, kind, payload))
    return rows


@st.composite
def wal_batches(draw: st.DrawFn) -> list[Row]:
    """Write batches in sequence order: every entry of a batch shares its seq."""
    rows: list[Row] = []
    seq = draw(st.integers(0, 2**40))
    for _ in range(draw(st.integers(0, 12))):
        seq += draw(st.integers(1, 1000))
        for _ in range(draw(st.integers(1, 5))):
            k, kind, payload = draw(entries())
            rows.append((k, seq, kind, payload))
    return rows


def _decoded_rows(blocks: list[Any]) -> list[Row]:
    return [(b.keys[i], b.seqs[i], b.kinds[i], b.payload(i)) for b in blocks for i in range(len(b))]


# ------------------------------------------------------------- pieces


@fuzz(200)
@given(rows=st.lists(st.tuples(st.binary(max_size=20), U64, st.just(0), VALUES), max_size=30), data=st.data())
def test_block_roundtrip(rows: list[Row], data: st.DataObject) -> None:
    rows = [(k, s, data.draw(entries(k))[1], v) for k, s, _, v in rows]  # any kind byte
    payload = encode_block(
        [r[0] for r in rows], [r[1] for r in rows], bytes(r[2] for r in rows), [r[3] for r in rows]
    )
    blk = decode_block(payload)
    assert [(blk.keys[i], blk.seqs[i], blk.kinds[i], blk.payload(i)) for i in range(len(blk))] == rows


@fuzz(200)
@given(payload=VALUES | st.binary(max_size=5000), codec=CODECS)
def test_frame_roundtrip_and_compression_only_when_it_pays(payload: bytes, codec: int) -> None:
    stored = frame_block(payload, codec)
    assert unframe_block(stored) == payload
    raw_len, stored_codec, _ = TRAILER.unpack_from(stored, len(stored) - TRAILER.size)
    assert raw_len == len(payload)
    assert stored_codec in (CODEC_NONE, codec)
    if stored_codec != CODEC_NONE:
        assert len(stored) - TRAILER.size < len(payload)
    else:
        assert len(stored) == len(payload) + TRAILER.size


@fuzz(100)
@given(head=st.binary(max_size=40), size=st.integers(0, 3 << 20), cut=st.integers(0, 3 << 20))
def test_crc_of_a_buffer_in_pieces_equals_the_crc_of_its_bytes(head: bytes, size: int, cut: int) -> None:
    data = (head + bytes(range(251)) * (size // 251 + 1))[:size]  # sizes across the MiB pieces
    view = memoryview(bytearray(data))  # writable: what the C extension refuses whole
    whole = crc32c_extend_view(0, view)
    assert whole == crc32c(data)
    cut = min(cut, len(data))
    assert crc32c_extend_view(crc32c_extend_view(0, view[:cut]), view[cut:]) == whole


@fuzz(200)
@given(body=st.binary(max_size=40), meta=st.none() | st.binary(max_size=40), expires=st.none() | U64)
def test_payload_roundtrip(body: bytes, meta: bytes | None, expires: int | None) -> None:
    flags, payload = encode_payload(body, meta, expires)
    assert flags & ~EXTRA_FLAGS == 0
    assert bool(flags & FLAG_META) == (meta is not None) and bool(flags & FLAG_EXPIRY) == (
        expires is not None
    )
    if not flags:
        assert payload == body, "plain values are stored as-is"
    for kind in (0, 1, 2):
        assert decode_payload(kind | flags, payload) == (body, meta, expires)


@fuzz(150)
@given(keys=st.sets(st.binary(max_size=16), max_size=300), bits=st.integers(1, 20))
def test_bloom_has_no_false_negatives(keys: set[bytes], bits: int) -> None:
    hashes = [key_hash(k) for k in keys]
    data = build_filter(hashes, len(hashes), bits)
    f = BloomFilter(data)
    assert f.probes == probes_for(bits)
    assert f.num_blocks == max(1, -(-len(keys) * bits // 512))
    assert all(f.may_contain_key(k) for k in keys)


# ---------------------------------------------------------------- SSTs


@fuzz(200)
@given(
    rows=table_rows(),
    block_size=st.integers(1, 4096),
    codec=CODECS,
    bloom_bits=st.integers(0, 16),
    one_by_one=st.booleans(),
)
def test_table_sst_roundtrip(
    rows: list[Row], block_size: int, codec: int, bloom_bits: int, one_by_one: bool
) -> None:
    b = SstBuilder(block_size=block_size, codec=codec, bloom_bits_per_key=bloom_bits, writer_epoch=9)
    if one_by_one:
        for r in rows:
            b.add(*r)
    else:
        b.add_many([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows])
    data, props = b.finish()
    meta, blocks = decode_sst(data)
    assert meta.props == props
    assert _decoded_rows(blocks) == rows
    assert all(len(blk) for blk in blocks), "no empty data blocks"
    # Properties describe the data.
    assert (props.kind, props.codec, props.entries, props.writer_epoch) == (SST_TABLE, codec, len(rows), 9)
    assert props.tombstones == sum(1 for r in rows if r[2] & TYPE_MASK == KIND_TOMBSTONE)
    assert props.raw_key_bytes == sum(len(r[0]) for r in rows)
    assert props.raw_value_bytes == sum(len(r[3]) for r in rows)
    if rows:
        assert (props.first_key, props.last_key) == (rows[0][0], rows[-1][0])
        assert (props.min_seq, props.max_seq) == (min(r[1] for r in rows), max(r[1] for r in rows))
    # The index is keyed by each block's last key and finds every key's newest version.
    assert meta.index.keys == [blk.keys[-1] for blk in blocks]
    newest: dict[bytes, Row] = {}
    for r in rows:
        newest.setdefault(r[0], r)
    for key, row in newest.items():
        i = meta.index.find(key)
        j = blocks[i].find(key)
        assert j >= 0 and (key, blocks[i].seqs[j], blocks[i].kinds[j], blocks[i].payload(j)) == row
    # The filter, when there is one, admits every key.
    if bloom_bits and rows:
        assert meta.bloom is not None and all(meta.bloom.may_contain_key(k) for k in newest)
    else:
        assert meta.bloom is None and meta.footer.filter_len == 0


@fuzz(200)
@given(rows=wal_batches(), block_size=st.integers(1, 2048), codec=CODECS, epoch=U64)
def test_wal_sst_roundtrip_never_splits_a_batch(
    rows: list[Row], block_size: int, codec: int, epoch: int
) -> None:
    b = SstBuilder(kind=SST_WAL, block_size=block_size, codec=codec, writer_epoch=epoch, created_at_ms=5)
    b.add_many([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows])
    data, props = b.finish()
    meta, blocks = decode_sst(data)
    assert _decoded_rows(blocks) == rows
    assert (meta.props.kind, meta.props.writer_epoch, meta.props.entries) == (SST_WAL, epoch, len(rows))
    assert meta.bloom is None and meta.footer.filter_len == 0
    assert meta.index.keys == [struct.pack(">Q", blk.seqs[0]) for blk in blocks]
    for a, c in pairwise(blocks):
        assert a.seqs[-1] != c.seqs[0], "a write batch was split across two blocks"
    if rows:
        assert (props.min_seq, props.max_seq) == (rows[0][1], rows[-1][1])
    else:
        fence = SstBuilder(kind=SST_WAL, codec=codec, writer_epoch=epoch, created_at_ms=5).finish()[0]
        assert data == fence, "no entries: the object is a fence, whatever the block size"


# ------------------------------------------------------------ manifests

ULIDS = st.builds(
    lambda first, rest: first + rest,
    st.sampled_from("01234567"),
    st.text(alphabet="0123456789ABCDEFGHJKMNPQRSTVWXYZ", min_size=25, max_size=25),
)
TIMES = st.floats(min_value=0, max_value=4e9, allow_nan=False, allow_infinity=False)
TEXT = st.text(max_size=20)
JSON_EXTRA = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | TIMES | TEXT,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(TEXT, kids, max_size=3),
    max_leaves=6,
)
# The names from_body reads as fields (the model's own set): an extra field must avoid them, or
# from_body would read it as the known field. Hypothesis also draws string constants from the
# code under test, so it does draw names like "prev_nonce".
KNOWN_FIELDS = model._KNOWN


def ssts(n_external: int) -> st.SearchStrategy[SstInfo]:
    return st.builds(
        SstInfo,
        id=ULIDS,
        size=U64,
        first_key=st.binary(max_size=12),
        last_key=st.binary(max_size=12),
        entries=U64,
        min_seq=U64,
        max_seq=U64,
        db=st.integers(0, n_external),
    )


def trees(n_external: int) -> st.SearchStrategy[Tree]:
    runs = st.builds(SortedRun, id=U64, ssts=st.lists(ssts(n_external), max_size=3).map(tuple))
    return st.builds(
        Tree, l0=st.lists(ssts(n_external), max_size=3).map(tuple), runs=st.lists(runs, max_size=2).map(tuple)
    )


def _sorted_pairs(d: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(d.items()))


@st.composite
def manifests(draw: st.DrawFn) -> Manifest:
    external = tuple(draw(st.lists(st.builds(ExternalDb, url=TEXT, checkpoint_id=st.uuids()), max_size=2)))
    n_ext = len(external)
    next_wal_id = draw(st.integers(1, 2**64 - 1))
    checkpoint = st.builds(
        Checkpoint,
        id=st.uuids(),
        manifest_id=U64,
        create_time_s=TIMES,
        expire_time_s=st.none() | TIMES,
        name=st.none() | TEXT,
        writer_epoch=st.none() | U64,
        metadata=st.dictionaries(TEXT, TEXT, max_size=3).map(_sorted_pairs),
    )
    journal = st.builds(
        JournalFile, id=ULIDS, size=U64, entries=U64, min_seq=U64, max_seq=U64, db=st.integers(0, n_ext)
    )
    return Manifest(
        id=draw(U64),
        writer_epoch=draw(U64),
        compactor_epoch=draw(U64),
        initialized=draw(st.booleans()),
        destroyed_at_s=draw(st.none() | TIMES),
        next_wal_id=next_wal_id,
        replay_after_wal_id=draw(st.integers(0, next_wal_id - 1)),
        last_l0_seq=draw(U64),
        data=draw(trees(n_ext)),
        index=draw(trees(n_ext)),
        next_run_id=draw(st.integers(1, 2**64 - 1)),
        tracked_wals=tuple(
            draw(st.lists(st.builds(TrackedWal, U64, U64, st.integers(0, 2**32 - 1)), max_size=3))
        ),
        checkpoints=tuple(draw(st.lists(checkpoint, max_size=2))),
        parent=draw(st.none() | st.builds(ParentRef, url=TEXT, checkpoint_id=st.uuids())),
        external_dbs=external,
        journal=tuple(draw(st.lists(journal, max_size=2))),
        options=draw(st.dictionaries(TEXT, TEXT, max_size=3).map(_sorted_pairs)),
        extra=draw(
            st.dictionaries(TEXT.filter(lambda k: k not in KNOWN_FIELDS), JSON_EXTRA, max_size=3).map(
                _sorted_pairs
            )
        ),
    )


@fuzz(200)
@given(m=manifests(), nonce=st.uuids().map(str), author=TEXT)
def test_manifest_roundtrip(m: Manifest, nonce: str, author: str) -> None:
    data = encode_manifest_body(to_body(m, nonce=nonce, author=author))
    body = decode_manifest_body(data)
    assert (body["nonce"], body["author"]) == (nonce, author)
    assert from_body(body) == m
    # Canonical: the same manifest always encodes to the same bytes.
    assert encode_manifest_body(to_body(from_body(body), nonce=nonce, author=author)) == data
    assert isinstance(uuid.UUID(nonce), uuid.UUID)


def test_append_blocks_refuses_pieces_that_do_not_match_their_sizes() -> None:
    b = SstBuilder()
    b.add(b"a", 1, 0, b"x")
    before = b.finish()[0]
    b = SstBuilder()
    b.add(b"a", 1, 0, b"x")
    stored = frame_block(encode_block([b"b"], [2], bytes(1), [b"y"]), CODEC_NONE)
    for pieces, sizes in (([stored], [len(stored) + 1]), ([stored[:-1]], [len(stored)]), ([], [])):
        with pytest.raises(ValueError, match="append_blocks"):
            b.append_blocks(
                pieces,
                stored=sizes,
                last_keys=[b"b"] * len(sizes),
                entries=[1] * len(sizes),
                first_key=b"b",
                seq=2,
                raw_key_bytes=1,
                raw_value_bytes=1,
            )
    assert b.finish()[0] == before  # nothing of the refused blocks stayed
