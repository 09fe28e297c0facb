"""The value journal (key/value separation, docs/design/value-journal.md): read values behind
pointers, compact the journal, rebuild the ledger from it, back a database up.

See docs/journal.md for the design and docs/format/journal.md for the bytes.
"""

from .compaction import JournalCompactionReport, compact_journal
from .resolver import JournalResolver

__all__ = ["JournalCompactionReport", "JournalResolver", "compact_journal"]
