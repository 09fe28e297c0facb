"""Keys of the database options a manifest carries (``Manifest.options``).

The writer's L0 flush records them (``shaledb.engine.flush.flush_options``);
bulk ingest and the ledger rebuild read and update them.
"""

from __future__ import annotations

OPT_RECOVERY = "journal_recovery"
"""The value journal's recovery strategy (``JournalOptions.recovery_strategy``)."""

OPT_COMPLETE = "journal.complete"
"""``"1"`` while the value journal holds every write since the database was created
(what ``rebuild-ledger`` needs), else ``"0"``."""

OPT_INDEXED = "index.enabled"
"""``"1"`` once secondary-index entries were written."""

OPT_WAL_WINDOW = "wal.max_in_flight"
"""The largest ``Settings.wal_max_in_flight`` any writer of the database claimed its
epoch with (absent: 1). An opening writer fences that many slots minus one after its
fence (``engine.recovery.write_fence``): a database whose writers never pipelined
pays one fence PUT per open, as before pipelining."""

OPT_COMPACTOR_RELEASED = "compactor.released"
"""The compactor epoch whose holder closed and gave the role up (a standalone compactor,
``run-compactor --once``, a Spark compaction): a writer's embedded compactor that it
fenced claims the role again (``compaction.compactor.EmbeddedCompactor``)."""

__all__ = ["OPT_COMPACTOR_RELEASED", "OPT_COMPLETE", "OPT_INDEXED", "OPT_RECOVERY", "OPT_WAL_WINDOW"]
