"""Compact a database until the scheduler finds nothing to do, for tests.

Tests that check what compaction keeps (merge chains, index terms, journal
pointers) need "everything that can be compacted now has been", not one pass:
a pass's output can make the next job eligible. One helper opens and closes the
compactor around its ``run_until_idle``.
"""

from __future__ import annotations

from ..clock import Clock
from ..compaction import Compactor
from ..settings import CompactorOptions

#: the options most tests want: compact two L0 SSTs or two sorted runs at once
EAGER = CompactorOptions(min_l0_ssts=2, min_merge_runs=2)


def compact_until_idle(
    url: str,
    options: CompactorOptions = EAGER,
    *,
    clock: Clock | None = None,
    max_passes: int = 6,
) -> int:
    """Run compaction passes on ``url`` until one does no work (at most
    ``max_passes``); returns the number of passes that did work."""
    comp = Compactor.open(url, options, seed=1, clock=clock)
    try:
        return comp.run_until_idle(max_passes)
    finally:
        comp.close()
