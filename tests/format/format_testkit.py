"""Fixed inputs, golden files and annotated hex dumps for the format tests and docs.

Everything here is deterministic: fixed nonces, timestamps, sequence numbers
and epochs, so encoding the same fixture always gives the same bytes. The
golden files under ``golden/`` pin those bytes; the annotated dumps in
``docs/format/*.md`` are rendered from them (see ``test_format_docs.py``).

Regenerating, deliberately, after a format change that is meant to break
compatibility (bump the format version first)::

    SHALEDB_REGEN_GOLDEN=1 .venv/bin/pytest tests/format -k "golden or docs"

Randomized tests take their seed from ``SHALEDB_TEST_SEED`` (alias
``SHALEDB_FUZZ_SEED``; a fresh one per run otherwise; ``conftest.py`` prints
it on failure), and hypothesis tests run ``SHALEDB_FUZZ_EXAMPLES`` examples
when it is set (the G11 pull-request bar is 10,000; the default keeps the suite
fast).
"""

from __future__ import annotations

import json
import os
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, seed, settings

from shaledb.format.block import decode_block, encode_block
from shaledb.format.bloom import WORDMIX, build_filter, key_hash, key_hash_wordmix
from shaledb.format.coding import CODEC_LZ4, CODEC_NONE, CODEC_ZSTD, TRAILER_SIZE, crc32c, frame_block
from shaledb.format.manifest import encode_manifest_body
from shaledb.format.merge import encode_merge
from shaledb.format.range_dels import KIND_RANGE_DEL, Fragments
from shaledb.format.row import (
    FLAG_EXPIRY,
    FLAG_INDEX_TREE,
    FLAG_INDEXED,
    FLAG_META,
    FLAG_TERMS,
    KIND_MERGE,
    KIND_POINTER,
    KIND_TOMBSTONE,
    KIND_VALUE,
    TYPE_MASK,
    encode_payload,
)
from shaledb.format.sst import FOOTER_SIZE, SST_TABLE, SstBuilder, parse_footer
from shaledb.format.wal import encode_wal
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
    to_body,
)
from shaledb.testing.seeds import run_seed

GOLDEN_DIR = Path(__file__).parent / "golden"
DOCS_DIR = Path(__file__).resolve().parents[2] / "docs" / "format"
REGEN = os.environ.get("SHALEDB_REGEN_GOLDEN") == "1"

# ------------------------------------------------------------------ seeds

FUZZ_SEED = run_seed("SHALEDB_FUZZ_SEED")
"""One seed per test run; every randomized test derives its randomness from it."""

_EXAMPLES_OVERRIDE = os.environ.get("SHALEDB_FUZZ_EXAMPLES")


def framed_manifest(body: str | dict[str, Any]) -> bytes:
    """A manifest envelope with a valid checksum around ``body`` (JSON text, or a dict dumped
    as Python's ``json`` would, NaN and Infinity included): a tampered body, not a damaged
    one. The engine's own encoder refuses to write what a tampering can put here."""
    text = body if isinstance(body, str) else json.dumps(body, sort_keys=True, separators=(",", ":"))
    raw = text.encode("ascii")
    head = struct.pack("<4sHHI", b"SHMF", 1, 0, len(raw)) + raw
    return head + struct.pack("<I", crc32c(head))


def fuzz(max_examples: int) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Hypothesis settings for a fuzz or property test, seeded with FUZZ_SEED.

    No example database (a failure is reproduced from the seed alone), and a
    1 s deadline per input (G11: every input decodes in at most a second).
    """

    def wrap(fn: Callable[..., None]) -> Callable[..., None]:
        configured = settings(
            max_examples=int(_EXAMPLES_OVERRIDE) if _EXAMPLES_OVERRIDE else max_examples,
            deadline=timedelta(seconds=1),
            database=None,
            derandomize=False,
            print_blob=True,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )(fn)
        return seed(FUZZ_SEED)(configured)

    return wrap


# --------------------------------------------------------------- fixtures

NONCE = bytes(range(16))
CREATED_AT_MS = 1_700_000_000_000
WRITER_EPOCH = 3
CODEC_NAMES = {CODEC_NONE: "none", CODEC_LZ4: "lz4", CODEC_ZSTD: "zstd"}

Row = tuple[bytes, int, int, bytes]
"""``(key, seq, kind, payload)`` as an SST stores it."""


def small_rows() -> list[Row]:
    """Five table entries covering every entry kind and both extras."""
    flags, cherry = encode_payload(b"dark", b"v1", 1_700_000_060_000)
    return [
        (b"apple", 7, KIND_VALUE, b"red"),
        (b"banana", 9, KIND_TOMBSTONE, b""),  # newest version of a repeated key first
        (b"banana", 3, KIND_VALUE, b"yellow"),
        (b"cherry", 5, KIND_VALUE | flags, cherry),
        (b"date", 4, KIND_POINTER | FLAG_INDEXED, b"\x01\x02\x03\x04"),  # opaque journal pointer
    ]


def many_rows(n: int = 64) -> list[Row]:
    """Compressible table entries for multi-block SSTs (every 8th is a tombstone)."""
    rows: list[Row] = []
    for i in range(n):
        key = b"key%03d" % i
        if i % 8 == 7:
            rows.append((key, 1000 + i, KIND_TOMBSTONE, b""))
        else:
            rows.append((key, 1000 + i, KIND_VALUE, b"value-%03d-" % i + b"x" * 30))
    return rows


def wal_rows() -> list[Row]:
    """Three write batches in sequence order; a batch is one sequence number."""
    _, k3 = encode_payload(b"v3", None, 1_700_000_120_000)
    return [
        (b"k1", 10, KIND_VALUE, b"v1"),
        (b"k2", 10, KIND_VALUE, b"v2"),
        (b"k1", 11, KIND_TOMBSTONE, b""),
        (b"k3", 12, KIND_VALUE | FLAG_EXPIRY, k3),
    ]


def range_del_list() -> list[tuple[bytes, bytes, int]]:
    """Two overlapping range tombstones ``(start, end, seq)``: three fragments."""
    return [(b"b", b"d", 8), (b"c", b"f", 6)]


def wal_range_rows() -> list[Row]:
    """A put, then a batch of a range delete of ``[a, m)`` and a put inside it."""
    return [
        (b"k1", 20, KIND_VALUE, b"v1"),
        (b"a", 21, KIND_RANGE_DEL, b"m"),
        (b"c", 21, KIND_VALUE, b"v2"),
    ]


def build_table_with_range_dels(rows: list[Row]) -> bytes:
    b = SstBuilder(kind=SST_TABLE, writer_epoch=WRITER_EPOCH, created_at_ms=CREATED_AT_MS, nonce=NONCE)
    b.add_many([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows])
    frags = Fragments.build(range_del_list())
    b.set_range_dels(frags, frags.starts[0], frags.ends[-1])
    return b.finish()[0]


def merge_rows() -> list[Row]:
    """Merge entries (SST format version 2): operands alone, and operands over a base."""
    return [
        (b"count", 12, KIND_MERGE, encode_merge([struct.pack("<Q", 1), struct.pack("<Q", 2)])),
        (b"list", 11, KIND_MERGE, encode_merge([b"c"], (KIND_VALUE, b"ab"))),
        (b"plain", 10, KIND_VALUE, b"v"),
    ]


def build_table(rows: list[Row], *, codec: int = CODEC_NONE, block_size: int = 4096) -> bytes:
    b = SstBuilder(
        kind=SST_TABLE,
        block_size=block_size,
        codec=codec,
        writer_epoch=WRITER_EPOCH,
        created_at_ms=CREATED_AT_MS,
        nonce=NONCE,
    )
    b.add_many([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows])
    return b.finish()[0]


def build_wal(rows: list[Row], *, codec: int = CODEC_NONE, block_size: int = 1) -> bytes:
    return encode_wal(
        [r[0] for r in rows],
        [(r[1], r[2], r[3]) for r in rows],
        epoch=WRITER_EPOCH,
        nonce=NONCE,
        created_at_ms=CREATED_AT_MS,
        codec=codec,
        block_size=block_size,
    )


def block_payload(rows: list[Row]) -> bytes:
    return encode_block(
        [r[0] for r in rows], [r[1] for r in rows], bytes(r[2] for r in rows), [r[3] for r in rows]
    )


def bloom_keys() -> list[bytes]:
    return [b"apple", b"banana", b"cherry"]


MANIFEST_NONCE = "00112233445566778899aabbccddeeff"
MANIFEST_AUTHOR = "golden-test"
_ULIDS = ["01HF0000000000000000000001", "01HF0000000000000000000002", "01HF0000000000000000000003"]


def small_manifest() -> Manifest:
    """A fresh database's first manifest (the envelope example)."""
    return Manifest(id=1)


def full_manifest() -> Manifest:
    """A manifest with every field set, including an unknown one that must round-trip."""
    cp = uuid.UUID("12345678-1234-5678-1234-567812345678")
    parent_cp = uuid.UUID("87654321-4321-8765-4321-876543218765")
    l0 = SstInfo(_ULIDS[0], 4599, b"key000", b"key063", 64, 1000, 1063)
    run = SstInfo(_ULIDS[1], 812, b"a", b"m", 10, 1, 20, db=1)
    return Manifest(
        id=42,
        writer_epoch=3,
        compactor_epoch=2,
        initialized=True,
        destroyed_at_s=None,
        next_wal_id=17,
        replay_after_wal_id=15,
        last_l0_seq=1063,
        data=Tree(l0=(l0,), runs=(SortedRun(5, (run,)),)),
        index=Tree(),
        next_run_id=6,
        tracked_wals=(TrackedWal(16, 120, 0xDEADBEEF),),
        checkpoints=(
            Checkpoint(cp, 40, 1_700_000_000.5, 1_700_003_600.0, "nightly", None, (("owner", "ops"),)),
        ),
        parent=ParentRef("s3://bucket/parent", parent_cp),
        external_dbs=(ExternalDb("s3://bucket/parent", parent_cp),),
        journal=(JournalFile(_ULIDS[2], 2048, 16, 100, 116),),
        options=(("journal_recovery", "retain"),),
        extra=(("future_field", {"added_in": "v2"}),),
    )


def manifest_bytes(m: Manifest) -> bytes:
    return encode_manifest_body(to_body(m, nonce=MANIFEST_NONCE, author=MANIFEST_AUTHOR))


@dataclass(frozen=True)
class Golden:
    name: str
    build: Callable[[], bytes]
    what: str


_FRAME_PAYLOAD = b"shaledb " * 8

GOLDENS: dict[str, Golden] = {
    g.name: g
    for g in (
        Golden("block_payload.bin", lambda: block_payload(small_rows()), "data block payload, 5 entries"),
        Golden("block_stored.bin", lambda: frame_block(block_payload(small_rows()), CODEC_NONE), "stored"),
        Golden("frame_none.bin", lambda: frame_block(_FRAME_PAYLOAD, CODEC_NONE), "64-byte payload, none"),
        Golden("frame_lz4.bin", lambda: frame_block(_FRAME_PAYLOAD, CODEC_LZ4), "64-byte payload, lz4"),
        Golden("frame_zstd.bin", lambda: frame_block(_FRAME_PAYLOAD, CODEC_ZSTD), "64-byte payload, zstd"),
        Golden(
            "bloom.bin",
            lambda: build_filter([key_hash(k) for k in bloom_keys()], len(bloom_keys()), 10),
            "filter of apple/banana/cherry, 10 bits per key",
        ),
        Golden(
            "bloom_wordmix.bin",
            lambda: build_filter([key_hash_wordmix(k) for k in bloom_keys()], len(bloom_keys()), 10, WORDMIX),
            "version-2 (wordmix) filter of apple/banana/cherry, 10 bits per key",
        ),
        Golden("table_small.sst", lambda: build_table(small_rows()), "table SST, 5 entries, one block"),
        Golden("table_none.sst", lambda: build_table(many_rows(), block_size=512), "table SST, 64 entries"),
        Golden("table_lz4.sst", lambda: build_table(many_rows(), codec=CODEC_LZ4, block_size=512), "lz4"),
        Golden("table_zstd.sst", lambda: build_table(many_rows(), codec=CODEC_ZSTD, block_size=512), "zstd"),
        Golden("wal.sst", lambda: build_wal(wal_rows()), "WAL SST, 3 batches, one a block"),
        Golden(
            "table_merge.sst", lambda: build_table(merge_rows()), "table SST with merge entries (version 2)"
        ),
        Golden("fence.sst", lambda: build_wal([]), "fencing object: an empty WAL SST"),
        Golden(
            "table_range_dels.sst",
            lambda: build_table_with_range_dels(small_rows()),
            "version-2 table SST: 5 entries and a range-del block of 3 fragments",
        ),
        Golden(
            "wal_range_del.sst", lambda: build_wal(wal_range_rows()), "version-2 WAL SST with a range delete"
        ),
        Golden("manifest_small.manifest", lambda: manifest_bytes(small_manifest()), "Manifest(id=1)"),
        Golden("manifest_full.manifest", lambda: manifest_bytes(full_manifest()), "every field set"),
    )
}


def golden_bytes(name: str) -> bytes:
    return (GOLDEN_DIR / name).read_bytes()


# ---------------------------------------------------------- hex rendering

Field = tuple[int, bytes, str]
"""``(offset, bytes, label)``: one field of an annotated dump."""


def _show(b: bytes) -> str:
    """Bytes for a label: b'...' when printable, else hex."""
    if all(0x20 <= c < 0x7F for c in b):
        return repr(b)
    return "0x" + b.hex()


def _shown(name: str) -> Callable[[bytes], str]:
    return lambda b: f"{name} = {_show(b)}"


def _u32s(b: bytes) -> list[int]:
    return list(struct.unpack(f"<{len(b) // 4}I", b))


def _u64s(b: bytes) -> list[int]:
    return list(struct.unpack(f"<{len(b) // 8}Q", b))


_KIND_NAMES = {KIND_VALUE: "VALUE", KIND_TOMBSTONE: "TOMBSTONE", KIND_POINTER: "POINTER", KIND_MERGE: "MERGE"}
_FLAG_NAMES = (
    (FLAG_META, "META"),
    (FLAG_EXPIRY, "EXPIRY"),
    (FLAG_INDEXED, "INDEXED"),
    (FLAG_TERMS, "TERMS"),
    (FLAG_INDEX_TREE, "INDEX_TREE"),
)


def _kind_name(k: int) -> str:
    if k == KIND_RANGE_DEL:
        return "RANGE_DEL"
    parts = [_KIND_NAMES.get(k & TYPE_MASK, "?")] + [name for bit, name in _FLAG_NAMES if k & bit]
    return "|".join(parts)


class _Cursor:
    """Walks a buffer field by field, as an independent reading of the spec."""

    def __init__(self, buf: bytes, base: int = 0) -> None:
        self.buf = buf
        self.pos = 0
        self.base = base
        self.fields: list[Field] = []

    def take(self, n: int, label: str | Callable[[bytes], str]) -> bytes:
        b = self.buf[self.pos : self.pos + n]
        assert len(b) == n, f"field {label!r} runs past the buffer"
        self.fields.append((self.base + self.pos, b, label(b) if callable(label) else label))
        self.pos += n
        return b

    def u(self, fmt: str, name: str) -> int:
        size = struct.calcsize(fmt)
        b = self.take(size, "")
        (v,) = struct.unpack(fmt, b)
        self.fields[-1] = (self.fields[-1][0], b, f"{name} = {v}")
        return int(v)

    def done(self) -> list[Field]:
        assert self.pos == len(self.buf), f"{len(self.buf) - self.pos} bytes left unexplained"
        return self.fields


PROPS_U64_FIELDS = (
    "entries",
    "min_seq",
    "max_seq",
    "writer_epoch",
    "created_at_ms",
    "tombstones",
    "raw_key_bytes",
    "raw_value_bytes",
)
FOOTER_FIELDS = (
    ("index_off", "<Q"),
    ("index_len", "<I"),
    ("filter_off", "<Q"),
    ("filter_len", "<I"),
    ("props_off", "<Q"),
    ("props_len", "<I"),
    ("format_version", "<H"),
    ("flags", "<H"),
)


def fields_block_payload(buf: bytes, base: int = 0) -> list[Field]:
    c = _Cursor(buf, base)
    n = c.u("<I", "n (entries)")
    key_off = _u32s(c.take(4 * (n + 1), lambda b: f"key_off[0..{n}] = {' '.join(map(str, _u32s(b)))}"))
    val_off = _u32s(c.take(4 * (n + 1), lambda b: f"val_off[0..{n}] = {' '.join(map(str, _u32s(b)))}"))
    c.take(8 * n, lambda b: f"seq[0..{n - 1}] = {' '.join(map(str, _u64s(b)))}")
    c.take(n, lambda b: "kind[] = " + " ".join(_kind_name(k) for k in b))
    for i in range(n):
        c.take(key_off[i + 1] - key_off[i], _shown(f"key[{i}]"))
    for i in range(n):
        c.take(val_off[i + 1] - val_off[i], _shown(f"value[{i}]"))
    return c.done()


def fields_stored(
    stored: bytes, base: int = 0, inner: Callable[[bytes, int], list[Field]] | None = None
) -> list[Field]:
    """A stored block: payload (annotated by ``inner`` when uncompressed), then the trailer."""
    _raw_len, codec, _crc = struct.unpack_from("<IBI", stored, len(stored) - TRAILER_SIZE)
    body = stored[: len(stored) - TRAILER_SIZE]
    fields: list[Field]
    if inner is not None and codec == CODEC_NONE:
        fields = inner(body, base)
    else:
        fields = [(base, body, f"payload ({len(body)} bytes, {CODEC_NAMES.get(codec, '?')}-compressed)")]
    c = _Cursor(stored[len(body) :], base + len(body))
    c.u("<I", "raw_len")
    c.take(1, lambda b: f"codec = {b[0]} ({CODEC_NAMES.get(b[0], '?')})")
    c.take(4, lambda b: f"crc32c = 0x{struct.unpack('<I', b)[0]:08x}")
    return fields + c.done()


def fields_bloom(buf: bytes, base: int = 0) -> list[Field]:
    c = _Cursor(buf, base)
    c.u("<B", "version")
    c.u("<B", "probes")
    nb = c.u("<I", "num_blocks")
    for i in range(nb):
        c.take(64, f"bits of filter block {i}")
    return c.done()


def fields_index(buf: bytes, base: int = 0) -> list[Field]:
    c = _Cursor(buf, base)
    n = c.u("<I", "n (data blocks)")
    c.take(8 * (n + 1), lambda b: f"block_off[0..{n}] = {' '.join(map(str, _u64s(b)))}")
    koff = _u32s(c.take(4 * (n + 1), lambda b: f"key_off[0..{n}] = {' '.join(map(str, _u32s(b)))}"))
    for i in range(n):
        c.take(koff[i + 1] - koff[i], _shown(f"index key[{i}]"))
    return c.done()


def fields_props(buf: bytes, base: int = 0) -> list[Field]:
    c = _Cursor(buf, base)
    c.take(1, lambda b: f"kind = {b[0]} ({ {0: 'table', 1: 'WAL', 2: 'journal'}.get(b[0], '?') })")
    c.take(1, lambda b: f"codec = {b[0]} ({CODEC_NAMES.get(b[0], '?')})")
    c.u("<H", "reserved")
    for name in PROPS_U64_FIELDS:
        c.u("<Q", name)
    c.take(16, lambda b: f"nonce = {b.hex()}")
    fl = c.u("<I", "first_key_len")
    c.take(fl, lambda b: f"first_key = {_show(b)}")
    ll = c.u("<I", "last_key_len")
    c.take(ll, lambda b: f"last_key = {_show(b)}")
    return c.done()


def fields_range_dels(buf: bytes, base: int = 0) -> list[Field]:
    c = _Cursor(buf, base)
    n = c.u("<I", "n (fragments)")
    koff = _u32s(c.take(4 * (2 * n + 1), lambda b: f"key_off[0..{2 * n}] = {' '.join(map(str, _u32s(b)))}"))
    soff = _u32s(c.take(4 * (n + 1), lambda b: f"seq_off[0..{n}] = {' '.join(map(str, _u32s(b)))}"))
    c.take(8 * soff[-1], lambda b: f"seq[0..{soff[-1] - 1}] = {' '.join(map(str, _u64s(b)))}")
    for i in range(2 * n):
        c.take(koff[i + 1] - koff[i], _shown(f"{'end' if i % 2 else 'start'}[{i // 2}]"))
    return c.done()


def fields_footer(buf: bytes, base: int = 0) -> list[Field]:
    c = _Cursor(buf, base)
    for name, fmt in FOOTER_FIELDS:
        c.u(fmt, name)
    c.take(4, lambda b: f"crc32c = 0x{struct.unpack('<I', b)[0]:08x} (of the 40 bytes above)")
    c.take(8, lambda b: f"magic = {_show(b)}")
    return c.done()


def fields_sst(data: bytes, *, data_blocks: bool = True) -> list[Field]:
    f = parse_footer(data, len(data))
    out: list[Field] = []
    idx_stored = data[f.index_off : f.index_off + f.index_len]
    idx_payload = idx_stored[:-TRAILER_SIZE]
    n = struct.unpack_from("<I", idx_payload)[0]
    offs = _u64s(idx_payload[4 : 4 + 8 * (n + 1)])
    for i in range(n):
        stored = data[offs[i] : offs[i + 1]]
        if data_blocks:
            out += fields_stored(stored, offs[i], fields_block_payload)
        else:
            out += fields_stored(stored, offs[i])
    if f.filter_len:
        out += fields_stored(data[f.filter_off : f.filter_off + f.filter_len], f.filter_off, fields_bloom)
    out += fields_stored(idx_stored, f.index_off, fields_index)
    rd_off = f.index_off + f.index_len
    if rd_off < f.props_off:  # version 2: the range-del block
        out += fields_stored(data[rd_off : f.props_off], rd_off, fields_range_dels)
    out += fields_stored(data[f.props_off : f.props_off + f.props_len], f.props_off, fields_props)
    out += fields_footer(data[-FOOTER_SIZE:], len(data) - FOOTER_SIZE)
    return out


def fields_manifest(data: bytes) -> list[Field]:
    c = _Cursor(data)
    c.take(4, lambda b: f"magic = {_show(b)}")
    c.u("<H", "format_version")
    c.u("<H", "flags")
    n = c.u("<I", "body_len")
    c.take(n, "body: JSON, ASCII, sorted keys, no whitespace")
    c.take(4, lambda b: f"crc32c = 0x{struct.unpack('<I', b)[0]:08x}")
    return c.done()


def render(fields: list[Field], *, max_rows: int = 0) -> str:
    """``offset  hex bytes  label`` rows, 16 bytes a row; long fields wrap.

    ``max_rows`` > 0 shortens a field to its first and last row with an
    ellipsis between (for the JSON body of a manifest).
    """
    lines: list[str] = []
    for off, b, label in fields:
        rows = [b[i : i + 16] for i in range(0, len(b), 16)] or [b""]
        starts = list(range(0, max(len(b), 1), 16))
        shown = list(zip(starts, rows))
        if max_rows and len(shown) > max_rows:
            shown = [*shown[: max_rows - 1], (-1, b""), shown[-1]]
        for j, (start, row) in enumerate(shown):
            if start < 0:
                lines.append("....  ..")
                continue
            text = label if j == 0 else ""
            lines.append(f"{off + start:04x}  {row.hex(' '):<47}  {text}".rstrip())
    return "\n".join(lines)


def check_fields(data: bytes, fields: list[Field]) -> None:
    """The annotated fields must tile ``data`` exactly, in order."""
    pos = 0
    for off, b, label in fields:
        assert off == pos, f"field {label!r} at {off}, expected {pos}"
        assert data[off : off + len(b)] == b
        pos += len(b)
    assert pos == len(data)


# ------------------------------------------------------ docs: golden dumps


def _dump_block() -> str:
    stored = golden_bytes("block_stored.bin")
    return render(fields_stored(stored, 0, fields_block_payload))


def _dump_frame(name: str) -> Callable[[], str]:
    return lambda: render(fields_stored(golden_bytes(name)))


def _dump_bloom(name: str) -> Callable[[], str]:
    return lambda: render(fields_bloom(golden_bytes(name)))


def _dump_bloom_hashes(hash_fn: Callable[[bytes], int]) -> Callable[[], str]:
    return lambda: _bloom_hashes(hash_fn)


def _bloom_hashes(hash_fn: Callable[[bytes], int]) -> str:
    """The hash, block and probe bits of each key of a bloom example."""
    lines = []
    for key in bloom_keys():
        h = hash_fn(key)
        bits = []
        x = h >> 32
        for _ in range(7):
            bits.append(x & 511)
            x >>= 9
        lines.append(f"{key!r:10} h = 0x{h:032x}")
        lines.append(f"{'':10} block = 0x{h & 0xFFFFFFFF:08x} % 1 = 0; bits = {' '.join(map(str, bits))}")
    return "\n".join(lines)


def _dump_table_small() -> str:
    return render(fields_sst(golden_bytes("table_small.sst")))


def _dump_wal() -> str:
    return render(fields_sst(golden_bytes("wal.sst")))


def _dump_table_range_dels() -> str:
    return render(fields_sst(golden_bytes("table_range_dels.sst")))


def _dump_wal_range_del() -> str:
    return render(fields_sst(golden_bytes("wal_range_del.sst")))


def fields_merge(buf: bytes, base: int = 0) -> list[Field]:
    """A merge entry's payload (docs/format/block.md, "Merge entries")."""
    c = _Cursor(buf, base)
    flags = c.u("<B", "flags")
    if flags & 1:
        c.u("<B", "base_kind")
        n = c.u("<I", "base_len")
        c.take(n, _shown("base payload"))
    count = c.u("<I", "n (operands)")
    for i in range(count):
        n = c.u("<I", f"len[{i}]")
        c.take(n, lambda b, i=i: f"operand[{i}] = {_show(b)}")  # type: ignore[misc]
    return c.done()


def _dump_table_merge() -> str:
    return render(fields_sst(golden_bytes("table_merge.sst")))


def _dump_merge_payloads() -> str:
    return "\n\n".join(render(fields_merge(r[3])) for r in merge_rows() if r[2] == KIND_MERGE)


def _dump_fence() -> str:
    return render(fields_sst(golden_bytes("fence.sst")))


def _dump_manifest() -> str:
    return render(fields_manifest(golden_bytes("manifest_small.manifest")), max_rows=3)


def _dump_manifest_body() -> str:
    return golden_bytes("manifest_small.manifest")[12:-4].decode("ascii")


def _dump_manifest_json() -> str:
    import json

    data = golden_bytes("manifest_full.manifest")
    body: dict[str, Any] = json.loads(data[12:-4])
    return json.dumps(body, indent=2, sort_keys=True)


DOC_DUMPS: dict[str, Callable[[], str]] = {
    "block_stored": _dump_block,
    "frame_none": _dump_frame("frame_none.bin"),
    "frame_lz4": _dump_frame("frame_lz4.bin"),
    "frame_zstd": _dump_frame("frame_zstd.bin"),
    "bloom": _dump_bloom("bloom.bin"),
    "bloom_hashes": _dump_bloom_hashes(key_hash),
    "bloom_wordmix": _dump_bloom("bloom_wordmix.bin"),
    "bloom_wordmix_hashes": _dump_bloom_hashes(key_hash_wordmix),
    "table_small": _dump_table_small,
    "wal": _dump_wal,
    "fence": _dump_fence,
    "table_range_dels": _dump_table_range_dels,
    "wal_range_del": _dump_wal_range_del,
    "table_merge": _dump_table_merge,
    "merge_payloads": _dump_merge_payloads,
    "manifest_small": _dump_manifest,
    "manifest_small_body": _dump_manifest_body,
    "manifest_full_json": _dump_manifest_json,
}
"""Names usable in ``<!-- golden:NAME -->`` markers in docs/format/*.md."""


def decode_block_rows(payload: bytes) -> list[Row]:
    blk = decode_block(payload)
    return [(blk.keys[i], blk.seqs[i], blk.kinds[i], blk.payload(i)) for i in range(len(blk))]
