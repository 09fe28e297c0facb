"""Hypothesis strategies and tiny settings for engine tests (needs ``hypothesis``).

Keys come from a small alphabet with shared prefixes and the edge bytes
0x00/0xFF, so random runs overwrite keys often and prefix scans have
interesting boundaries (``prefix_end`` of ``b"\\xff"``). Values mix short ones
with ones larger than the tiny block size, so SSTs get several blocks.
"""

from __future__ import annotations

from hypothesis import strategies as st

from ..settings import RetryOptions, Settings

KEYS: tuple[bytes, ...] = (
    b"\x00",
    b"a",
    b"aa",
    b"ab",
    b"abc",
    b"b",
    b"ba",
    b"bb",
    b"c",
    b"k\x00",
    b"\xff",
    b"\xff\xff",
)
"""The key universe of model-based tests."""

PREFIXES: tuple[bytes, ...] = (b"", b"a", b"ab", b"b", b"k", b"\xff", b"\xff\xff", b"z")


def keys() -> st.SearchStrategy[bytes]:
    return st.sampled_from(KEYS)


def values() -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.binary(max_size=24),
        st.binary(min_size=200, max_size=700),
    )


def bounds() -> st.SearchStrategy[bytes | None]:
    return st.one_of(st.none(), st.sampled_from(KEYS), st.binary(min_size=1, max_size=3))


FAST_RETRY = RetryOptions(max_attempts=4, initial_backoff_s=0.001, max_backoff_s=0.004, timeout_s=30.0)
"""Retries that cost (almost) no time, even on a real clock."""


def tiny_settings(**overrides: object) -> Settings:
    """Settings that make every mechanism run often on a few kilobytes of data.

    Memtables freeze at 4 KiB (about 20 small entries), WAL objects are cut
    at 700 bytes, SST blocks are 256 bytes; no compactor or garbage collector
    (``l0_max_ssts`` is high so L0 flushes never wait for one).
    """
    base: dict[str, object] = {
        "flush_interval_s": 0.05,
        "wal_max_bytes": 700,
        "l0_sst_size_bytes": 4096,
        "max_unflushed_bytes": 1 << 20,
        "l0_max_ssts": 1_000_000,
        "block_size_bytes": 256,
        "block_cache_bytes": 64 * 1024,
        "sst_read_ahead_bytes": 1024,
        "manifest_update_timeout_s": 30.0,
        "retry": FAST_RETRY,
        "compactor": None,
        "garbage_collector": None,
    }
    base.update(overrides)
    return Settings(**base)  # type: ignore[arg-type]


__all__ = ["FAST_RETRY", "KEYS", "PREFIXES", "bounds", "keys", "tiny_settings", "values"]
