"""Bulk ingest: SSTs built outside the writer, added to the manifest in one CAS.

A bulk load has three steps, each in whichever process suits it (the Spark
data source runs them in its planner, its tasks and its commit process; a
plain program may run all three itself):

1. :func:`begin_ingest` fixes what the ingest is ordered against and returns
   an :class:`IngestPlan` (a small, picklable value every step receives);
2. :class:`PartWriter` (or :func:`write_part`) turns one sorted key range of
   columns into table SSTs written straight to ``compacted/<ULID>.sst`` (plus
   index-tree SSTs for the rows' secondary-index terms, and value-journal
   objects for values of at least ``value_separation_threshold``; see
   ``shaledb.bulk.ingest.outputs`` and docs/journal.md) and returns an
   :class:`IngestPart` describing them;
3. :func:`commit_ingest` adds every part's SSTs to the manifest in one CAS
   (:func:`abort_ingest` deletes them instead).

Ordering against existing data
------------------------------
Reads take the first version they meet, newest source first (memtable, L0,
sorted runs), and a reopened writer replays the WAL objects after
``replay_after_wal_id`` as newer than every SST. So where the SSTs go decides
which version wins, and a live writer's memtable and WAL always sit above
anything an outside process adds. Two modes are therefore offered:

* **Claim** (the default): the ingest is newer than everything written
  before :func:`begin_ingest`. Begin opens the database as a writer, which
  fences any live writer (its next write or flush raises ``FencedError``;
  nothing it acknowledged is lost), flushes the WAL it replayed to L0,
  reserves the next sequence number for the ingest and closes again, leaving
  the database claimed at that writer epoch. The commit re-checks the epoch in
  its CAS: if any writer opened since, it raises :class:`IngestFenced` and
  commits nothing (re-run the job). The ingest's SSTs go on top of the sorted
  runs when no L0 SST overlaps their key range (then the L0 data, all older,
  cannot share a key with them), and as L0 SSTs in front of the existing ones
  otherwise. A concurrent writer is thus either ordered before the ingest
  (everything it wrote before being fenced) or refused (it opened after
  begin, and the ingest fails).
* **Behind** (``behind=True``): the data is older than everything already
  there: sequence number 0, placed below the bottom sorted run. Nothing is
  claimed, so a live writer keeps running. A key that was deleted earlier and
  whose tombstone compaction has already dropped comes back.

Within an ingest every entry carries the same sequence number (the ingest is
one atomic batch). Duplicate keys within a part are an error unless
``duplicates="last"``, which keeps the last of equal keys in the order given
(the Spark layer sorts by key and an ordering column, so "last" is
deterministic). Parts whose key ranges overlap (input that was not range
partitioned) cannot form one sorted run: they are committed as L0 SSTs
(claim) or one sorted run each (behind), a higher partition number being the
newer.

Idempotence
-----------
Every ingest has an id (given, or a fresh UUID). The commit records it in
``Manifest.ingests`` (the last :data:`INGEST_HISTORY` ingests) in the same
CAS, so committing an id again is a no-op, and :func:`begin_ingest` of a
recorded id neither claims the database nor writes SSTs. Each part carries a
*fingerprint* of its rows (CRC32C of the key, value and metadata streams and
their lengths); fingerprints combine across parts in key order, independent
of where the partitions were cut, so a re-run of the same id with different
data raises :class:`IngestConflict` instead of being ignored. A re-run under
a new id writes the same rows again as a newer version of the same keys: the
database's contents are the same, and compaction drops the older copy.

Failed and speculative attempts
-------------------------------
Every attempt of a part writes SSTs under fresh ULIDs and nothing else; only
the commit makes SSTs visible, and it takes exactly one part per partition
number (a speculative duplicate of a partition is dropped and logged).
Unreferenced SSTs are deleted by the garbage collector after its minimum
age. While the ingest runs, a *lease* object ``compactions/<ULID>.job``
(started at begin, or adopted there from the caller as a stream micro-batch's
tasks take one before they stage their rows; rewritten by the tasks, deleted
by commit or abort, or by the caller when adopted) keeps
the GC from deleting the ingest's not-yet-committed SSTs however long the job
takes (the GC keeps unreferenced SSTs created after a live lease started).
The lease carries no compactor epoch (it records the largest one, so no
compactor supersedes it); it ends when it is deleted or ``lease_s`` passes
without a renewal.
"""

from __future__ import annotations

from .arrow import contiguous, sort_indices
from .commit import abort_ingest, begin_ingest, commit_ingest, ingest_columns
from .model import (
    DUPLICATES,
    INGEST_HISTORY,
    IngestConflict,
    IngestFenced,
    IngestPart,
    IngestPlan,
    IngestResult,
    crc32c_combine,
    fingerprint,
)
from .parts import PartWriter, bloom_filter_bytes, open_ingest_store, write_part

__all__ = [
    "DUPLICATES",
    "INGEST_HISTORY",
    "IngestConflict",
    "IngestFenced",
    "IngestPart",
    "IngestPlan",
    "IngestResult",
    "PartWriter",
    "abort_ingest",
    "begin_ingest",
    "bloom_filter_bytes",
    "commit_ingest",
    "contiguous",
    "crc32c_combine",
    "fingerprint",
    "ingest_columns",
    "open_ingest_store",
    "sort_indices",
    "write_part",
]
