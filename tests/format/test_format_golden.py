"""Golden bytes: today's encoders must reproduce the checked-in files, and today's
decoders must read them back to the fixture values.

The first half catches an accidental change of the bytes we write; the second
half catches a change that would make us unable to read what older versions
wrote. A deliberate format change bumps the format version and regenerates
(see ``format_testkit``); a compressor library upgrade may change the lz4 or
zstd bytes legitimately, in which case the decode tests must still pass
against the old files before they are regenerated.
"""

from __future__ import annotations

import json
import struct

import pytest
from format_testkit import (
    CREATED_AT_MS,
    GOLDEN_DIR,
    GOLDENS,
    MANIFEST_AUTHOR,
    MANIFEST_NONCE,
    NONCE,
    REGEN,
    WRITER_EPOCH,
    Row,
    bloom_keys,
    decode_block_rows,
    full_manifest,
    golden_bytes,
    many_rows,
    small_manifest,
    small_rows,
    wal_rows,
)

from shaledb.format.bloom import BloomFilter, key_hash, probe_mask
from shaledb.format.coding import CODEC_LZ4, CODEC_NONE, CODEC_ZSTD, TRAILER, unframe_block
from shaledb.format.manifest import decode_manifest_body
from shaledb.format.row import decode_payload
from shaledb.format.sst import FOOTER_SIZE, SST_TABLE, SST_WAL, SstMeta, decode_sst
from shaledb.format.wal import wal_object_epoch
from shaledb.manifest.model import from_body, to_body


@pytest.mark.parametrize("name", sorted(GOLDENS))
def test_encoder_reproduces_golden_bytes(name: str) -> None:
    fresh = GOLDENS[name].build()
    path = GOLDEN_DIR / name
    if REGEN:
        GOLDEN_DIR.mkdir(exist_ok=True)
        path.write_bytes(fresh)
        pytest.skip(f"regenerated {path}")
    assert path.exists(), f"{path} is missing: run with SHALEDB_REGEN_GOLDEN=1 to create it"
    old = path.read_bytes()
    if fresh != old:
        first = next((i for i, (a, b) in enumerate(zip(fresh, old)) if a != b), min(len(fresh), len(old)))
        pytest.fail(
            f"{name} ({GOLDENS[name].what}): encoding changed at byte {first} "
            f"({len(old)} bytes checked in, {len(fresh)} now). Objects written by older versions "
            "must stay readable: bump the format version for a deliberate change, then regenerate."
        )


def _rows(blocks: list) -> list[Row]:  # type: ignore[type-arg]
    return [(b.keys[i], b.seqs[i], b.kinds[i], b.payload(i)) for b in blocks for i in range(len(b))]


def _stored_codecs(data: bytes, meta: SstMeta) -> list[int]:
    offs = meta.index.offsets
    return [TRAILER.unpack_from(data, offs[i + 1] - TRAILER.size)[1] for i in range(len(meta.index))]


def test_golden_block_decodes_to_the_fixture() -> None:
    payload = golden_bytes("block_payload.bin")
    assert decode_block_rows(payload) == small_rows()
    assert unframe_block(golden_bytes("block_stored.bin")) == payload
    cherry = small_rows()[3]
    assert decode_payload(cherry[2], cherry[3]) == (b"dark", b"v1", 1_700_000_060_000)


@pytest.mark.parametrize(
    ("name", "codec"),
    [("frame_none.bin", CODEC_NONE), ("frame_lz4.bin", CODEC_LZ4), ("frame_zstd.bin", CODEC_ZSTD)],
)
def test_golden_frames_decode(name: str, codec: int) -> None:
    stored = golden_bytes(name)
    raw_len, stored_codec, _ = TRAILER.unpack_from(stored, len(stored) - TRAILER.size)
    assert (raw_len, stored_codec) == (64, codec)
    if codec != CODEC_NONE:
        assert len(stored) < 64, "the fixture must be compressible, or the codec is not exercised"
    assert unframe_block(stored) == b"shaledb " * 8


def test_golden_bloom_filter_answers_like_the_fixture() -> None:
    f = BloomFilter(golden_bytes("bloom.bin"))
    assert (f.probes, f.num_blocks) == (7, 1)
    assert all(f.may_contain_key(k) for k in bloom_keys())
    # Pins the hash: with 21 of 512 bits set, these keys are known negatives today.
    absent = [b"zucchini", b"elderberry", b"fig", b"grape"]
    assert [f.may_contain_key(k) for k in absent] == [False] * len(absent)
    # BLAKE2b-128 read little-endian (bloom.md), and the 7 probe bits it selects.
    h = key_hash(b"apple")
    assert h == 0xE8605BA59277F1CB16295E039C3B37AB
    assert probe_mask(h, 7) == sum(1 << b for b in (3, 175, 394, 354, 284, 447, 73))
    assert f.may_contain(h, probe_mask(h, 7))


def test_golden_small_table_decodes() -> None:
    data = golden_bytes("table_small.sst")
    meta, blocks = decode_sst(data)
    assert _rows(blocks) == small_rows()
    p = meta.props
    assert (p.kind, p.codec, p.entries, p.tombstones) == (SST_TABLE, CODEC_NONE, 5, 1)
    assert (p.min_seq, p.max_seq, p.writer_epoch) == (3, 9, WRITER_EPOCH)
    assert (p.created_at_ms, p.nonce) == (CREATED_AT_MS, NONCE)
    assert (p.first_key, p.last_key) == (b"apple", b"date")
    assert (p.raw_key_bytes, p.raw_value_bytes) == (
        sum(len(r[0]) for r in small_rows()),
        sum(len(r[3]) for r in small_rows()),
    )
    assert meta.index.keys == [b"date"]
    assert meta.footer.version == 1
    assert data[-8:] == b"SHALESST"
    assert meta.bloom is not None and all(meta.bloom.may_contain_key(r[0]) for r in small_rows())


@pytest.mark.parametrize(
    ("name", "codec"),
    [("table_none.sst", CODEC_NONE), ("table_lz4.sst", CODEC_LZ4), ("table_zstd.sst", CODEC_ZSTD)],
)
def test_golden_tables_decode(name: str, codec: int) -> None:
    data = golden_bytes(name)
    meta, blocks = decode_sst(data)
    rows = many_rows()
    assert _rows(blocks) == rows
    assert len(blocks) > 1
    assert meta.props.codec == codec
    assert meta.props.tombstones == sum(1 for r in rows if r[2] == 1)
    assert meta.index.keys == [b.keys[-1] for b in blocks]
    stored = _stored_codecs(data, meta)
    if codec == CODEC_NONE:
        assert set(stored) == {CODEC_NONE}
    else:
        assert codec in stored, "no block was compressed: the fixture no longer exercises the codec"
    assert meta.bloom is not None and all(meta.bloom.may_contain_key(r[0]) for r in rows)


def test_golden_wal_decodes_batch_per_block() -> None:
    data = golden_bytes("wal.sst")
    meta, blocks = decode_sst(data)
    assert _rows(blocks) == wal_rows()
    assert meta.props.kind == SST_WAL
    assert meta.bloom is None and meta.footer.filter_len == 0
    assert [b.seqs.tolist() for b in blocks] == [[10, 10], [11], [12]]
    assert meta.index.keys == [struct.pack(">Q", s) for s in (10, 11, 12)]
    assert (meta.props.min_seq, meta.props.max_seq) == (10, 12)
    assert (meta.props.first_key, meta.props.last_key) == (b"", b"")
    assert wal_object_epoch(data) == WRITER_EPOCH


def test_golden_fence_carries_the_epoch_and_nothing_else() -> None:
    data = golden_bytes("fence.sst")
    meta, blocks = decode_sst(data)
    assert blocks == [] and len(meta.index) == 0 and meta.props.entries == 0
    assert meta.props.kind == SST_WAL
    assert meta.footer.index_off == 0, "a fence has no data region"
    assert wal_object_epoch(data) == WRITER_EPOCH
    assert wal_object_epoch(b"") is None, "a zero-length object is a fence of unknown epoch"
    assert len(data) > FOOTER_SIZE


@pytest.mark.parametrize(
    ("name", "manifest"),
    [("manifest_small.manifest", small_manifest()), ("manifest_full.manifest", full_manifest())],
)
def test_golden_manifests_decode(name: str, manifest: object) -> None:
    data = golden_bytes(name)
    body = decode_manifest_body(data)
    assert (body["nonce"], body["author"]) == (MANIFEST_NONCE, MANIFEST_AUTHOR)
    m = from_body(body)
    assert m == manifest
    # Unknown fields survive a read-modify-write (the full fixture has one).
    assert to_body(m, nonce=MANIFEST_NONCE, author=MANIFEST_AUTHOR) == body
    assert data[:4] == b"SHMF" and struct.unpack_from("<H", data, 4)[0] == 1
    assert json.loads(data[12:-4]) == body
