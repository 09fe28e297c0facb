"""The one owner of object names.

Every object a database writes lives under its root, at a name built here:

    manifest/<20-digit id>.manifest   one per manifest version, contiguous ids
    wal/<20-digit id>.sst             WAL SSTs and fencing objects, contiguous ids
    compacted/<ULID>.sst              L0 and sorted-run SSTs
    journal/<ULID>.journal            value-journal objects
    compactions/<ULID>.job            leases of running compaction jobs (GC reads them)
    compactions/<20-digit epoch>.role a standalone compactor's role lease (a second one stands by)
    tmp/<...>                         temporary objects (two-phase writes, jobs)

Ids are zero-padded to 20 digits so listing order is id order. Names parsed
back from listings or from manifest contents go through the ``parse_*``
functions, which accept only this grammar: nothing derived from stored bytes
can point outside the root.
"""

from __future__ import annotations

import random
import re

from ..errors import InvalidPathError

MANIFEST_DIR = "manifest/"
WAL_DIR = "wal/"
SST_DIR = "compacted/"
JOURNAL_DIR = "journal/"
TMP_DIR = "tmp/"
JOB_DIR = "compactions/"
STAGE_DIR = f"{TMP_DIR}stage/"
"""Sorted runs a bulk load exchanges between its tasks (``shaledb.bulk.ingest.exchange``)."""

OWN_DIRS = (MANIFEST_DIR, WAL_DIR, SST_DIR, JOURNAL_DIR, TMP_DIR, JOB_DIR)
"""Every folder a database writes in. Nothing outside them is the database's: destroying it
deletes these folders' objects only (its root may hold a user's other files)."""

_MAX_ID = 2**64 - 1
_ID_RE = re.compile(r"[0-9]{20}")
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_ULID_RE = re.compile(r"[0-7][0-9A-HJKMNP-TV-Z]{25}")


def _fmt_id(n: int) -> str:
    if not 0 <= n <= _MAX_ID:
        raise InvalidPathError(f"id {n} is outside 0..2**64-1")
    return f"{n:020d}"


def manifest_path(manifest_id: int) -> str:
    return f"{MANIFEST_DIR}{_fmt_id(manifest_id)}.manifest"


def wal_path(wal_id: int) -> str:
    return f"{WAL_DIR}{_fmt_id(wal_id)}.sst"


def sst_path(sst_id: str) -> str:
    check_ulid(sst_id)
    return f"{SST_DIR}{sst_id}.sst"


def journal_path(journal_id: str) -> str:
    check_ulid(journal_id)
    return f"{JOURNAL_DIR}{journal_id}.journal"


def journal_object_path(ref: str) -> str:
    """The object of a value-journal file: ``ref`` is a WAL id as 20 digits
    (``wal/<id>.sst``, a WAL object kept as a journal file) or a ULID
    (``journal/<ULID>.journal``)."""
    if isinstance(ref, str) and _ID_RE.fullmatch(ref):
        return wal_path(int(ref))
    return journal_path(ref)


def check_journal_ref(value: str) -> str:
    """Return ``value`` if it names a journal file (20 digits or a ULID), else raise."""
    if isinstance(value, str) and _ID_RE.fullmatch(value):
        return value
    return check_ulid(value)


def job_path(job_id: str) -> str:
    check_ulid(job_id)
    return f"{JOB_DIR}{job_id}.job"


def role_lease_path(epoch: int) -> str:
    """The role lease of standalone compactor epoch ``epoch`` (``compaction.role``)."""
    return f"{JOB_DIR}{epoch:020d}.role"


def stage_prefix(exchange_id: str) -> str:
    """Where the staged runs of one bulk load's exchange go (its lease's ULID)."""
    check_ulid(exchange_id)
    return f"{STAGE_DIR}{exchange_id}/"


def stage_path(exchange_id: str, run_id: str) -> str:
    check_ulid(run_id)
    return f"{stage_prefix(exchange_id)}{run_id}.arrows"


def _parse_numbered(path: str, prefix: str, suffix: str) -> int | None:
    if not (path.startswith(prefix) and path.endswith(suffix)):
        return None
    core = path[len(prefix) : len(path) - len(suffix)]
    if not _ID_RE.fullmatch(core):
        return None
    return int(core)


def parse_manifest_id(path: str) -> int | None:
    """The id of a ``manifest/<id>.manifest`` name, or None for anything else."""
    return _parse_numbered(path, MANIFEST_DIR, ".manifest")


def parse_wal_id(path: str) -> int | None:
    """The id of a ``wal/<id>.sst`` name, or None for anything else."""
    return _parse_numbered(path, WAL_DIR, ".sst")


def parse_sst_id(path: str) -> str | None:
    """The ULID of a ``compacted/<ULID>.sst`` name, or None for anything else."""
    if not (path.startswith(SST_DIR) and path.endswith(".sst")):
        return None
    core = path[len(SST_DIR) : -len(".sst")]
    return core if _ULID_RE.fullmatch(core) else None


def parse_journal_id(path: str) -> str | None:
    """The ULID of a ``journal/<ULID>.journal`` name, or None for anything else."""
    if not (path.startswith(JOURNAL_DIR) and path.endswith(".journal")):
        return None
    core = path[len(JOURNAL_DIR) : -len(".journal")]
    return core if _ULID_RE.fullmatch(core) else None


def parse_stage_id(path: str) -> str | None:
    """The run's ULID of a ``tmp/stage/<exchange ULID>/<ULID>.arrows`` name, or None."""
    if not (path.startswith(STAGE_DIR) and path.endswith(".arrows")):
        return None
    exchange, _, core = path[len(STAGE_DIR) : -len(".arrows")].partition("/")
    return core if _ULID_RE.fullmatch(exchange) and _ULID_RE.fullmatch(core) else None


def parse_job_id(path: str) -> str | None:
    """The ULID of a ``compactions/<ULID>.job`` name, or None for anything else."""
    if not (path.startswith(JOB_DIR) and path.endswith(".job")):
        return None
    core = path[len(JOB_DIR) : -len(".job")]
    return core if _ULID_RE.fullmatch(core) else None


def parse_role_epoch(path: str) -> int | None:
    """The epoch of a ``compactions/<20-digit epoch>.role`` name, or None for anything else."""
    if not (path.startswith(JOB_DIR) and path.endswith(".role")):
        return None
    core = path[len(JOB_DIR) : -len(".role")]
    return int(core) if _ID_RE.fullmatch(core) else None


def is_own(path: str) -> bool:
    """Whether ``path`` (relative to a database's root) lies in one of the database's folders."""
    return path.startswith(OWN_DIRS)


def check_ulid(value: str) -> str:
    """Return ``value`` if it is a canonical ULID, else raise InvalidPathError."""
    if not isinstance(value, str) or not _ULID_RE.fullmatch(value):
        raise InvalidPathError(f"not a valid object id: {value!r}")
    return value


def new_ulid(now_s: float, rng: random.Random) -> str:
    """A ULID: 48-bit millisecond time then 80 random bits, Crockford base32.

    The time prefix makes ids sort by creation time, which GC uses as an age
    hint; the RNG is injected so tests are reproducible.
    """
    ms = max(0, int(now_s * 1000)) & ((1 << 48) - 1)
    value = (ms << 80) | rng.getrandbits(80)
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def ulid_time_s(ulid: str) -> float:
    """The creation time embedded in a ULID, in seconds since the epoch."""
    check_ulid(ulid)
    value = 0
    for ch in ulid[:10]:
        value = value * 32 + _CROCKFORD.index(ch)
    return value / 1000.0


_BAD_SEGMENTS = {"", ".", ".."}


def check_relative_path(path: str) -> str:
    """Validate a path relative to a store root; return it unchanged.

    Rejects anything that could escape the root or be read differently by
    another store: absolute paths, ``.``/``..`` segments (also percent-encoded),
    empty segments, backslashes, NUL and control characters.
    """
    if not isinstance(path, str) or not path:
        raise InvalidPathError("object path must be a non-empty string")
    if len(path) > 1024:
        raise InvalidPathError("object path is longer than 1024 characters")
    if path.startswith("/") or "\\" in path:
        raise InvalidPathError(f"object path must be relative and use '/': {path!r}")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in path):
        raise InvalidPathError(f"object path contains control characters: {path!r}")
    for seg in path.split("/"):
        decoded = seg.replace("%2e", ".").replace("%2E", ".")
        if seg in _BAD_SEGMENTS or decoded in _BAD_SEGMENTS or "%2f" in seg.lower():
            raise InvalidPathError(f"object path has an invalid segment: {path!r}")
    return path


def check_prefix(prefix: str) -> str:
    """Validate a listing prefix: a relative path that may end with '/'."""
    if prefix == "":
        return prefix
    check_relative_path(prefix[:-1] if prefix.endswith("/") else prefix)
    return prefix
