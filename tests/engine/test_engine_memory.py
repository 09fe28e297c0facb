"""Memory the engine keeps to its budgets: the glibc mmap threshold and the WAL object cap.

The benchmark (``bench/run.py``, memcheck) measures peak RSS against the budgets;
these tests pin the mechanisms it relies on.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap

import pytest

from shaledb import InvalidArgument, Settings
from shaledb.engine import allocator
from shaledb.engine.wal import wal_object_bytes

MiB = 1 << 20

# Free 24 one-MiB buffers that sit between small live objects: what stays resident?
# glibc first raises its mmap threshold (8 MiB buffer freed), so the buffers come
# from the heap and their space cannot go back while the small objects live.
_PROBE = textwrap.dedent(
    """
    import sys
    from shaledb.engine.allocator import fix_mmap_threshold

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096 / 2**20

    if sys.argv[1] == "fix":
        assert fix_mmap_threshold(128 * 1024)
    b = bytearray(8 << 20)
    del b
    before = rss()
    big, small = [], []
    for i in range(24):
        big.append(b"x" * (1 << 20))
        small.append(b"y" * 600)
    del big
    print(rss() - before)
    """
)


def _retained_mib(mode: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, mode],
        check=True,
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")},
        timeout=60,
    )
    return float(out.stdout.strip())


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")
def test_fixed_mmap_threshold_gives_freed_buffers_back() -> None:
    control = _retained_mib("leave")
    if control < 4:
        pytest.skip(f"this glibc kept only {control:.1f} MiB without the fix: nothing to show")
    assert _retained_mib("fix") < 2, "freed 1 MiB buffers stayed resident with the threshold fixed"


def test_fix_mmap_threshold_checks_its_argument_and_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="mmap threshold"):
        allocator.fix_mmap_threshold(0)
    with pytest.raises(ValueError, match="mmap threshold"):
        allocator.fix_mmap_threshold(64 * MiB)
    monkeypatch.setattr(allocator, "_applied", None)
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert allocator.fix_mmap_threshold(128 * 1024) is False  # the user's choice stands
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_")
    if platform.libc_ver()[0] == "glibc":
        assert allocator.fix_mmap_threshold(128 * 1024) is True
        assert allocator.fix_mmap_threshold(128 * 1024) is True  # idempotent


@pytest.mark.parametrize("bad", [0, -1, 33 * MiB, "128k"])
def test_bad_mmap_threshold_setting_names_the_option(bad: object) -> None:
    with pytest.raises(InvalidArgument, match="malloc_mmap_threshold_bytes"):
        Settings(malloc_mmap_threshold_bytes=bad)  # type: ignore[arg-type]
    assert Settings(malloc_mmap_threshold_bytes=None).malloc_mmap_threshold_bytes is None


def test_wal_objects_shrink_with_the_write_budget() -> None:
    assert wal_object_bytes(Settings()) == 4 * MiB  # defaults: wal_max_bytes
    tight = Settings(max_unflushed_bytes=16 * MiB, l0_sst_size_bytes=8 * MiB)
    assert wal_object_bytes(tight) == 1 * MiB
    tiny = Settings(max_unflushed_bytes=64 * 1024, l0_sst_size_bytes=4096)
    assert wal_object_bytes(tiny) == 256 * 1024  # the floor
    assert wal_object_bytes(tiny.replace(wal_max_bytes=700)) == 700  # an explicit smaller size wins
