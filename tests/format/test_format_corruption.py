"""Damage to a stored object is always detected, and always as CorruptionError.

Every byte of every object is covered by a CRC32C (a block trailer, the SST
footer or the manifest envelope), and the structure around the checksums is
tight (blocks tile the object, lengths add up), so flipping any bit, cutting
the object short or appending to it must make the full decoder raise
``CorruptionError``: never another exception, and never a successful decode
of data that differs from what was written.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

import pytest
from format_testkit import FUZZ_SEED, WRITER_EPOCH, framed_manifest, golden_bytes

from shaledb.errors import CorruptionError
from shaledb.format.manifest import decode_manifest_body
from shaledb.format.sst import FOOTER_SIZE, decode_meta, decode_sst, parse_footer
from shaledb.format.wal import wal_object_epoch
from shaledb.manifest.model import from_body

Decoder = Callable[[bytes], object]


def full_sst(data: bytes) -> object:
    return decode_sst(data)


def full_manifest(data: bytes) -> object:
    return from_body(decode_manifest_body(data))


SSTS = ["table_small.sst", "table_none.sst", "table_lz4.sst", "table_zstd.sst", "wal.sst", "fence.sst"]
OBJECTS: list[tuple[str, Decoder]] = [(n, full_sst) for n in SSTS]
OBJECTS += [("manifest_small.manifest", full_manifest), ("manifest_full.manifest", full_manifest)]


def undetected(decode: Decoder, variants: Iterator[tuple[str, bytes]]) -> list[str]:
    """Descriptions of the variants that decoded, or failed with the wrong exception."""
    bad = []
    for what, data in variants:
        try:
            decode(data)
        except CorruptionError:
            continue
        except Exception as exc:
            bad.append(f"{what}: {type(exc).__name__}: {exc}")
            continue
        bad.append(f"{what}: decoded without error")
    return bad


def xor_bytes(data: bytes, mask: int = 0xFF) -> Iterator[tuple[str, bytes]]:
    buf = bytearray(data)
    for i in range(len(data)):
        buf[i] ^= mask
        yield f"byte {i} ^ 0x{mask:02x}", bytes(buf)
        buf[i] ^= mask


def bit_flips(data: bytes, positions: list[int]) -> Iterator[tuple[str, bytes]]:
    buf = bytearray(data)
    for bit in positions:
        buf[bit // 8] ^= 1 << (bit % 8)
        yield f"bit {bit} (byte {bit // 8})", bytes(buf)
        buf[bit // 8] ^= 1 << (bit % 8)


def _report(name: str, bad: list[str]) -> str:
    return f"{name}: {len(bad)} undetected, e.g. " + "; ".join(bad[:5])


@pytest.mark.parametrize(("name", "decode"), OBJECTS, ids=[o[0] for o in OBJECTS])
def test_every_byte_inverted_is_detected(name: str, decode: Decoder) -> None:
    data = golden_bytes(name)
    decode(data)  # the undamaged object decodes
    bad = undetected(decode, xor_bytes(data))
    assert not bad, _report(name, bad)


def test_every_single_bit_flip_of_a_4k_sst_is_detected() -> None:
    """G11's exhaustive sweep: all ~34,000 single-bit flips of a 4 KiB table SST."""
    data = golden_bytes("table_none.sst")
    assert 4000 <= len(data) <= 5000
    bad = undetected(full_sst, bit_flips(data, list(range(8 * len(data)))))
    assert not bad, _report("table_none.sst", bad)


@pytest.mark.parametrize(("name", "decode"), OBJECTS, ids=[o[0] for o in OBJECTS])
def test_sampled_single_bit_flips_are_detected(name: str, decode: Decoder) -> None:
    data = golden_bytes(name)
    rng = random.Random(FUZZ_SEED)
    positions = rng.sample(range(8 * len(data)), min(2000, 8 * len(data)))
    bad = undetected(decode, bit_flips(data, positions))
    assert not bad, _report(name, bad)


@pytest.mark.parametrize(("name", "decode"), OBJECTS, ids=[o[0] for o in OBJECTS])
def test_truncation_at_every_length_is_detected(name: str, decode: Decoder) -> None:
    data = golden_bytes(name)
    tails = ((f"first {k} bytes", data[:k]) for k in range(len(data)))
    heads = ((f"without the first {k} bytes", data[k:]) for k in range(1, len(data) + 1))
    bad = undetected(decode, tails) + undetected(decode, heads)
    assert not bad, _report(name, bad)


def _extensions(data: bytes) -> Iterator[tuple[str, bytes]]:
    for k in range(1, len(data) + 1):
        yield f"+{k} zero bytes", data + bytes(k)
        yield f"+{k} 0xff bytes", data + b"\xff" * k
        yield f"+ first {k} bytes again", data + data[:k]
        # A retried final part of an upload: the object ends with a second, valid footer.
        yield f"+ last {k} bytes again", data + data[-k:]


@pytest.mark.parametrize(("name", "decode"), OBJECTS, ids=[o[0] for o in OBJECTS])
def test_extension_at_every_length_is_detected(name: str, decode: Decoder) -> None:
    data = golden_bytes(name)
    bad = undetected(decode, _extensions(data))
    assert not bad, _report(name, bad)


def test_empty_objects_are_corrupt_except_as_wal_fences() -> None:
    for decode in (full_sst, full_manifest):
        with pytest.raises(CorruptionError):
            decode(b"")
    assert wal_object_epoch(b"") is None


@pytest.mark.parametrize("name", ["fence.sst", "wal.sst"])
def test_a_damaged_wal_object_never_reports_another_epoch(name: str) -> None:
    """Fencing trusts the epoch in a WAL object: damage must raise, never change it.

    ``wal_object_epoch`` reads only the metadata, so damage to a data block may
    go unnoticed there (the block is checked on replay), but the epoch it
    returns is always the one that was written.
    """
    data = golden_bytes(name)
    rng = random.Random(FUZZ_SEED)
    variants = list(xor_bytes(data)) + list(bit_flips(data, rng.sample(range(8 * len(data)), 500)))
    variants += [(f"first {k} bytes", data[:k]) for k in range(1, len(data))]
    for what, damaged in variants:
        try:
            epoch = wal_object_epoch(damaged)
        except CorruptionError:
            continue
        assert epoch == WRITER_EPOCH, f"{what}: read epoch {epoch}"


def test_reader_tail_path_detects_damage_in_the_metadata() -> None:
    """The read path decodes the metadata from a tail read (``parse_footer`` first)."""
    data = golden_bytes("table_none.sst")
    meta_start = parse_footer(data, len(data)).meta_start
    size = len(data)

    def from_tail(d: bytes) -> object:
        footer = parse_footer(d[-FOOTER_SIZE:], size)
        return decode_meta(d[min(footer.meta_start, meta_start) :], size)

    variants = ((w, d) for w, d in xor_bytes(data) if int(w.split()[1]) >= meta_start)
    bad = undetected(from_tail, variants)
    assert not bad, _report("table_none.sst tail", bad)


def _tampered_body() -> dict[str, object]:
    import json
    import uuid

    from shaledb.manifest.model import Checkpoint, IngestRecord, Manifest, to_body

    m = Manifest(
        id=3,
        destroyed_at_s=30.0,
        checkpoints=(Checkpoint(uuid.UUID(int=1), 2, 10.0, 20.0),),
        ingests=(IngestRecord("i", 2, 15.0, 1, 1),),
    )
    body: dict[str, object] = json.loads(json.dumps(to_body(m, nonce="n", author="test")))
    return body


FLOAT_FIELDS = {
    "destroyed_at_s": lambda b: b,
    "create_time_s": lambda b: b["checkpoints"][0],
    "expire_time_s": lambda b: b["checkpoints"][0],
    "time_s": lambda b: b["ingests"][0],
}


@pytest.mark.parametrize("value", ["Infinity", "-Infinity", "NaN", "1e300", "253402300800", "-1", "1e999"])
@pytest.mark.parametrize("field", sorted(FLOAT_FIELDS))
def test_a_manifest_time_that_is_not_finite_or_in_range_is_corruption(field: str, value: str) -> None:
    # Every float field of the body is a time: a tampered Infinity or NaN was refused, but
    # 1e300 (after year 9999: a listing's datetime failed on it) was read as a time.
    import json

    body = _tampered_body()
    FLOAT_FIELDS[field](body)[field] = "@@"
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    assert full_manifest(framed_manifest(text.replace('"@@"', "12.5")))  # the same body, in range: reads
    with pytest.raises(CorruptionError, match=f"{field}|not a JSON number"):
        full_manifest(framed_manifest(text.replace('"@@"', value)))


@pytest.mark.parametrize("value", ["Infinity", "-Infinity", "NaN"])
def test_nan_and_infinity_are_refused_anywhere_in_a_manifest(value: str) -> None:
    # Python's json reads them; a field this version does not know kept one and wrote it back.
    import json

    from shaledb.format.manifest import encode_manifest_body

    body = _tampered_body()
    body["a_later_field"] = "@@"
    text = json.dumps(body, sort_keys=True, separators=(",", ":")).replace('"@@"', value)
    with pytest.raises(CorruptionError, match=f"{value} is not a JSON number"):
        decode_manifest_body(framed_manifest(text))
    with pytest.raises(ValueError):
        encode_manifest_body({"a_later_field": float(value.lower().replace("infinity", "inf"))})
