"""A reference model of one database under crashes: what may be read back.

The writer gives every write a sequence number and a WAL object holds whole
writes in sequence order, so what survives a crash is a *prefix* of the
write history: it contains every acknowledged write (no acknowledged write is
lost, no holes) and possibly some writes that were not acknowledged yet, and
nothing else (nothing invented, nothing reordered). RocksDB's crash test
checks the same property with its per-key "pending" bits.

:class:`HistoryModel` keeps the acknowledged state as a dict (``base``) and
the writes not yet known to be durable as a list (``pending``, in sequence
order). Acknowledging write *i* acknowledges every earlier one too (the
durable watermark only moves forward). After a crash,
:meth:`HistoryModel.resolve_crash` finds the prefix the recovered database
holds, or raises :class:`ModelMismatch` naming each key's allowed values
("maybe" values of the pending writes) against what was read.

Values are ``bytes``; ``None`` stands for a deletion.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

Op = tuple[bytes, "bytes | None"]


class ModelMismatch(AssertionError):
    """The database holds something the model cannot explain."""


@dataclass(frozen=True, slots=True)
class Write:
    """One atomic write: its operations in order (a later op on a key wins)."""

    number: int
    ops: tuple[Op, ...]
    seq: int | None = None


class MergeOperand(bytes):
    """An op's value that is a merge with ``shaledb.merge.append``: the key's value
    (empty if absent) followed by these bytes."""


def apply_ops(state: dict[bytes, bytes], ops: Iterable[Op]) -> None:
    for key, value in ops:
        if value is None:
            state.pop(key, None)
        elif type(value) is MergeOperand:
            state[key] = state.get(key, b"") + bytes(value)
        else:
            state[key] = value


def expected_scan(
    state: Mapping[bytes, bytes],
    start: bytes | None = None,
    end: bytes | None = None,
    *,
    prefix: bytes | None = None,
    reverse: bool = False,
    limit: int | None = None,
) -> list[tuple[bytes, bytes]]:
    """What ``scan(start, end, prefix=, reverse=, limit=)`` returns over ``state``."""
    keys = sorted(
        k
        for k in state
        if (start is None or k >= start)
        and (end is None or k < end)
        and (prefix is None or k.startswith(prefix))
    )
    if reverse:
        keys.reverse()
    if limit is not None:
        keys = keys[:limit]
    return [(k, state[k]) for k in keys]


class HistoryModel:
    """Acknowledged state plus pending writes (see module docstring)."""

    def __init__(self, base: Mapping[bytes, bytes] | None = None) -> None:
        self.base: dict[bytes, bytes] = dict(base or {})
        self.pending: list[Write] = []
        self._next_number = 0
        self.acked_seq = 0
        """The highest sequence number known to be durable."""
        self.crashes = 0
        self.lost_writes = 0
        self.kept_unacked_writes = 0

    # ----------------------------------------------------------------- writes

    def write(self, ops: Sequence[Op], *, seq: int | None = None) -> int:
        """Record a write the database accepted (or may have); returns its number."""
        n = self._next_number
        self._next_number += 1
        self.pending.append(Write(n, tuple(ops), seq))
        return n

    def ack(self, number: int) -> None:
        """Write ``number`` is durable, hence so is every earlier write."""
        keep: list[Write] = []
        for w in self.pending:
            if w.number <= number:
                apply_ops(self.base, w.ops)
                if w.seq is not None:
                    self.acked_seq = max(self.acked_seq, w.seq)
            else:
                keep.append(w)
        self.pending = keep

    def ack_all(self) -> None:
        if self.pending:
            self.ack(self.pending[-1].number)

    def is_pending(self, number: int) -> bool:
        return any(w.number == number for w in self.pending)

    # ------------------------------------------------------------------ reads

    def current(self) -> dict[bytes, bytes]:
        """What a reader of the live database sees: every accepted write."""
        state = dict(self.base)
        for w in self.pending:
            apply_ops(state, w.ops)
        return state

    def allowed(self, key: bytes) -> set[bytes | None]:
        """Every value ``key`` may hold after a crash (None: absent)."""
        state = dict(self.base)
        out: set[bytes | None] = {state.get(key)}
        for w in self.pending:
            apply_ops(state, w.ops)
            out.add(state.get(key))
        return out

    # ------------------------------------------------------------------ crash

    def resolve_crash(self, observed: Mapping[bytes, bytes]) -> int:
        """Match a recovered database to a prefix of the history; returns how many
        pending writes survived, and makes that state the new acknowledged base.

        Raises :class:`ModelMismatch` if no prefix that keeps every acknowledged
        write equals ``observed``.
        """
        state = dict(self.base)
        candidates = [dict(state)]
        for w in self.pending:
            apply_ops(state, w.ops)
            candidates.append(dict(state))
        obs = dict(observed)
        # The shortest matching prefix: if several match (a write that changed
        # nothing), claim no more survivors than the data proves.
        for n in range(len(candidates)):
            if candidates[n] == obs:
                for w in self.pending[:n]:
                    if w.seq is not None:
                        self.acked_seq = max(self.acked_seq, w.seq)
                self.crashes += 1
                self.kept_unacked_writes += n
                self.lost_writes += len(self.pending) - n
                self.base = obs
                self.pending = []
                return n
        raise ModelMismatch(self.explain(obs))

    def explain(self, observed: Mapping[bytes, bytes]) -> str:
        lines = [
            f"recovered state matches no prefix of the history "
            f"({len(self.pending)} pending write(s) after the acknowledged ones)"
        ]
        keys = sorted(set(observed) | set(self.base) | {k for w in self.pending for k, _ in w.ops})
        for k in keys:
            allowed = self.allowed(k)
            got = observed.get(k)
            flag = "" if got in allowed else "   <-- not allowed"
            shown = sorted((_short(v) for v in allowed), key=str)
            lines.append(f"  {k!r}: read {_short(got)}, allowed {shown}{flag}")
        lines.append("  pending writes (oldest first):")
        for w in self.pending:
            lines.append(f"    #{w.number} seq={w.seq} {[(k, _short(v)) for k, v in w.ops]}")
        return "\n".join(lines)


def _short(v: bytes | None) -> str:
    if v is None:
        return "<absent>"
    if len(v) <= 16:
        return repr(v)
    return f"{v[:12]!r}...({len(v)} bytes)"


__all__ = ["HistoryModel", "ModelMismatch", "Op", "Write", "apply_ops", "expected_scan"]
