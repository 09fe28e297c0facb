"""Shared pieces of every persisted format: checksums, block framing, compression.

A *stored block* is ``payload | u32 raw_len | u8 codec | u32 crc32c`` where the
CRC covers everything before it and ``raw_len`` is the payload's size before
compression. Decompression is bounded by ``raw_len`` (itself bounded by the
format's block limit), so a damaged length can never make us allocate
gigabytes. Everything is little-endian.
"""

from __future__ import annotations

import struct
import sys
import threading
from array import array
from typing import TYPE_CHECKING

import google_crc32c

if TYPE_CHECKING:
    import zstandard

from ..errors import CorruptionError

CODEC_NONE = 0
CODEC_LZ4 = 1
CODEC_ZSTD = 2
CODECS = {"none": CODEC_NONE, "lz4": CODEC_LZ4, "zstd": CODEC_ZSTD}

MAX_BLOCK_BYTES = 1 << 30
"""No decoded block may claim more than this (1 GiB); larger means damage."""

TRAILER = struct.Struct("<IBI")
TRAILER_SIZE = TRAILER.size
_U32 = struct.Struct("<I")
_LITTLE = sys.byteorder == "little"

crc32c = google_crc32c.value


def crc32c_extend(crc: int, data: bytes) -> int:
    return int(google_crc32c.extend(crc, data))


def crc32c_of(data: bytes | bytearray | memoryview) -> int:
    """CRC32C of ``data``; a bytearray is read through :func:`crc32c_extend_view`."""
    if isinstance(data, bytes):
        return int(crc32c(data))
    return crc32c_extend_view(0, memoryview(data))


def crc32c_extend_view(crc: int, view: memoryview) -> int:
    """``crc`` extended by the bytes of any buffer (an Arrow buffer, a bytearray).

    The C extension takes only ``bytes``, so the buffer is copied 64 KiB at a
    time: a whole copy of tens of MiB is a fresh mapping whose page faults cost
    four times the CRC itself. 64 KiB stays under the allocator's mmap threshold
    even where it is fixed low (``Settings.malloc_mmap_threshold_bytes``, 128 KiB
    in the benchmarks), so every piece reuses the same freed heap block; a MiB
    piece was a fresh mapping there too (5x the cost of the CRC of a 4 MiB WAL
    object, issue 30 item 5).
    """
    for i in range(0, len(view), _VIEW_PIECE):
        crc = crc32c_extend(crc, view[i : i + _VIEW_PIECE].tobytes())
    return crc


_VIEW_PIECE = 64 * 1024


_tls = threading.local()


# The codec libraries load on first use (2.7 MiB of resident memory that a
# database without compression never needs).


def _zstd_c() -> zstandard.ZstdCompressor:
    c = getattr(_tls, "zc", None)
    if c is None:
        import zstandard

        c = _tls.zc = zstandard.ZstdCompressor(level=3)
    return c


def _zstd_d() -> zstandard.ZstdDecompressor:
    d = getattr(_tls, "zd", None)
    if d is None:
        import zstandard

        d = _tls.zd = zstandard.ZstdDecompressor()
    return d


def _compressed(payload: bytes, codec: int) -> tuple[bytes, int]:
    """``(body, codec)``: ``payload`` compressed with ``codec`` if that makes it smaller,
    else itself with :data:`CODEC_NONE`."""
    if codec == CODEC_LZ4:
        import lz4.block

        comp = lz4.block.compress(payload, store_size=False)
    elif codec == CODEC_ZSTD:
        comp = _zstd_c().compress(payload)
    else:
        return payload, CODEC_NONE
    return (comp, codec) if len(comp) < len(payload) else (payload, CODEC_NONE)


_TRAILER_HEAD = struct.Struct("<IB")


def frame_block(payload: bytes, codec: int) -> bytes:
    """Compress (if it pays) and frame ``payload`` as a stored block."""
    body, tail = framed(payload, codec)
    return body + tail


def framed(payload: bytes, codec: int) -> tuple[bytes, bytes]:
    """:func:`frame_block` in two pieces, the body and its 9-byte trailer, for a caller
    that appends them to a buffer: a WAL block holds a whole write batch, hundreds of
    KiB with large values, and each temporary copy that size is a fresh mapping to
    fault in (see ``shaledb.engine.allocator``)."""
    body, codec = _compressed(payload, codec)
    trailer = _TRAILER_HEAD.pack(len(payload), codec)
    return body, trailer + _U32.pack(crc32c_extend(crc32c(body), trailer))


def unframe_block(stored: bytes | memoryview, what: str = "block") -> bytes:
    """Check and decompress a stored block; raise CorruptionError on any damage."""
    n = len(stored)
    if n < TRAILER_SIZE:
        raise CorruptionError(f"{what} is {n} bytes, shorter than its trailer")
    raw_len, codec, crc = TRAILER.unpack_from(stored, n - TRAILER_SIZE)
    head = bytes(stored[: n - 4])
    if crc32c(head) != crc:
        raise CorruptionError(f"{what} checksum mismatch")
    body = head[: n - TRAILER_SIZE]
    if raw_len > MAX_BLOCK_BYTES:
        raise CorruptionError(f"{what} claims {raw_len} bytes")
    if codec == CODEC_NONE:
        if len(body) != raw_len:
            raise CorruptionError(f"{what} length {len(body)} != recorded {raw_len}")
        return body
    try:
        if codec == CODEC_LZ4:
            import lz4.block

            out = lz4.block.decompress(body, uncompressed_size=raw_len)
        elif codec == CODEC_ZSTD:
            # zstd sizes its output from the frame header and ignores
            # max_output_size when the header has a content size: check it here,
            # or a small frame could inflate far beyond raw_len before we notice.
            import zstandard

            declared = zstandard.frame_content_size(body)
            if declared >= 0 and declared != raw_len:
                raise CorruptionError(f"{what} zstd frame holds {declared} bytes, expected {raw_len}")
            out = _zstd_d().decompress(body, max_output_size=raw_len)
        else:
            raise CorruptionError(f"{what} has unknown codec {codec}")
    except CorruptionError:
        raise
    except Exception as exc:
        raise CorruptionError(f"{what} does not decompress: {exc}") from exc
    if len(out) != raw_len:
        raise CorruptionError(f"{what} decompressed to {len(out)} bytes, expected {raw_len}")
    return bytes(out)


def u32_array(buf: bytes, start: int, count: int, what: str) -> array[int]:
    """``count`` little-endian u32 values at ``buf[start:]``, bounds-checked."""
    end = start + 4 * count
    if count < 0 or end > len(buf):
        raise CorruptionError(f"{what}: {count} u32 values do not fit")
    a = array("I")
    a.frombytes(buf[start:end])
    if not _LITTLE:
        a.byteswap()
    return a


def u64_array(buf: bytes, start: int, count: int, what: str) -> array[int]:
    """``count`` little-endian u64 values at ``buf[start:]``, bounds-checked."""
    end = start + 8 * count
    if count < 0 or end > len(buf):
        raise CorruptionError(f"{what}: {count} u64 values do not fit")
    a = array("Q")
    a.frombytes(buf[start:end])
    if not _LITTLE:
        a.byteswap()
    return a


def pack_u32s(values: array[int] | list[int]) -> bytes:
    a = values if isinstance(values, array) and values.typecode == "I" else array("I", values)
    if not _LITTLE:
        a = array("I", a)
        a.byteswap()
    return a.tobytes()


def pack_u64s(values: array[int] | list[int]) -> bytes:
    a = values if isinstance(values, array) and values.typecode == "Q" else array("Q", values)
    if not _LITTLE:
        a = array("Q", a)
        a.byteswap()
    return a.tobytes()


def check_offsets(off: array[int], total: int, what: str) -> None:
    """Offsets must start at 0, never decrease, and end at ``total``."""
    if not off or off[0] != 0 or off[-1] != total:
        raise CorruptionError(f"{what}: offsets do not span the data")
    lst = off.tolist()
    if lst != sorted(lst):
        raise CorruptionError(f"{what}: offsets decrease")
