#!/usr/bin/env python3
"""What a scan's checkpoint reference costs: ``ViewPins.acquire`` + ``release``, the pair
every scan and snapshot takes and drops on a writer (``shaledb.engine.pins``).

    PYTHONPATH=src .venv/bin/python bench/pin_refs.py [--calls 500000] [--repeats 5]

Prints the best of ``--repeats`` timings, in nanoseconds per pair.
"""

from __future__ import annotations

import argparse
import random
import timeit
import uuid

from shaledb.engine.pins import ViewPins
from shaledb.manifest.model import Checkpoint


class _Clock:
    def now(self) -> float:
        return 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=500_000)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    pins = ViewPins(_Clock(), random.Random(1), grace_s=1.0)  # type: ignore[arg-type]
    pins.current = Checkpoint(
        id=uuid.UUID(int=7, version=4), manifest_id=1, create_time_s=0.0, writer_epoch=1
    )

    def pair() -> None:
        pins.release(pins.acquire())

    best = min(timeit.repeat(pair, number=a.calls, repeat=a.repeats)) / a.calls
    print(f"acquire + release: {best * 1e9:.0f} ns per pair (best of {a.repeats} x {a.calls:,})")


if __name__ == "__main__":
    main()
