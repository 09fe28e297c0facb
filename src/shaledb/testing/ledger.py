"""The crash tests' ledger of issued and acknowledged writes, kept outside the database.

A process under test appends one JSON line per event to a file opened with
``O_APPEND``: ``{"w": n, "ops": [[key, value-or-null], ...]}`` *before* write
``n`` is issued, and ``{"ack": n}`` once it is acknowledged (RocksDB's
pending/acknowledged pattern). Acknowledgements are fsynced, so the ledger is
at least as durable as the database it describes: a write the ledger calls
acknowledged was acknowledged, even across a machine crash. Keys and values
are bytes, stored as latin-1 strings (a lossless round trip).

:func:`read_ledger` tolerates a torn last line (the one being written when the
process was killed). Every record carries ``"t"``, the monotonic time it was
written, for the consistency checker (:mod:`shaledb.testing.linearizability`).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable, Iterator
from typing import Any

Ops = list[tuple[bytes, "bytes | None"]]


def _s(b: bytes | None) -> str | None:
    return None if b is None else b.decode("latin-1")


def _b(s: str | None) -> bytes | None:
    return None if s is None else s.encode("latin-1")


class Ledger:
    """The writing side: one O_APPEND descriptor, whole lines per ``os.write``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def log(self, obj: dict[str, Any], *, sync: bool = False) -> None:
        """Append ``obj`` with ``"t"``, the ``time.monotonic()`` of the event (one clock for
        every process on the machine, so histories of several processes line up)."""
        os.write(self.fd, (json.dumps({**obj, "t": time.monotonic()}) + "\n").encode())
        if sync:
            os.fdatasync(self.fd)

    def write(self, n: int, ops: Ops) -> None:
        self.log({"w": n, "ops": [[_s(k), _s(v)] for k, v in ops]})

    def ack(self, n: int) -> None:
        self.log({"ack": n}, sync=True)

    def close(self) -> None:
        os.close(self.fd)


def read_ledger(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """The ledger's records in order; ``ops`` decoded back to bytes."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # the line being written when the process died
        if "ops" in rec:
            rec["ops"] = [(_b(k), _b(v)) for k, v in rec["ops"]]
        yield rec


def state_digest(items: Iterable[tuple[bytes, bytes]]) -> str:
    """A short digest of a database's contents (sorted key/value pairs)."""
    h = hashlib.sha256()
    for k, v in sorted(items):
        h.update(len(k).to_bytes(4, "big") + k + len(v).to_bytes(4, "big") + v)
    return h.hexdigest()[:32]


__all__ = ["Ledger", "Ops", "read_ledger", "state_digest"]
