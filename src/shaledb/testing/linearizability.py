"""Checking recorded histories of a key-value store against its consistency promises.

A history is a list of :class:`Op` recorded by several processes: writes
(puts, deletes and atomic batches, as ``(key, value-or-None)`` operations)
and reads (the values seen for some keys, or the whole contents), each with
the times it was called and returned (``time.monotonic()`` is one clock for
every process on a machine). A write whose outcome is unknown (its process was
killed, or the call timed out) has ``ret=None``: it may have taken effect at
any point after its call, or never. A write that failed for certain (e.g.
``FencedError``) has ``ok=False`` and must have had no effect at all.

:func:`check` searches for a total order of the operations, explaining every
read, that respects

* program order: the operations of one process take effect in the order the
  process issued them (a writer's pipelined non-durable writes included:
  sequence numbers are assigned in call order);
* real time, for the processes named *strong*: if a strong operation
  returned before another strong one was called, it comes first
  (linearizability); a write of unknown outcome may carry a ``deadline``
  after which it can no longer take effect (the moment a new writer's open
  fenced its process);
* with ``prefix=True``, if a write of a process never took effect, neither
  did any later write of that process (what a WAL replayed in order gives).

With every process strong this is linearizability (Herlihy and Wing); with
none, sequential consistency (Lamport), which is what a reader in another
process promises: it sees the writes as a growing prefix, never going back,
though later than they were acknowledged. The search is Wing and Gong's, with
Lowe's memoisation of (operations done, state) pairs; it only ever branches
between the processes' next *writes* (a read that the current state explains
is taken at once: it changes nothing, so taking it early is never worse), so
histories of thousands of operations from a few processes are quick.

:func:`prefix_positions` is the fast special case the crash soak uses for a
single writer's history: it maps each observed state (by digest) to the
write prefix it equals, and checks a reader never goes back.

The checker itself is tested on hand-made histories with known verdicts
(tests/reliability/test_linearizability.py) before its verdict on real runs
is trusted.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

KvOps = tuple[tuple[bytes, "bytes | None"], ...]
State = tuple[tuple[bytes, bytes], ...]


@dataclass(frozen=True)
class Op:
    """One operation of a history (see the module docstring)."""

    process: str
    call: float
    ret: float | None
    writes: KvOps = ()
    """For a write: its operations in order (value None deletes)."""
    read: Mapping[bytes, bytes | None] | None = None
    """For a read: what was seen for each key read (None: absent)."""
    read_all: bool = False
    """The read saw the whole contents: keys not in ``read`` were absent."""
    ok: bool = True
    deadline: float | None = None
    label: str = ""

    @property
    def is_read(self) -> bool:
        return self.read is not None


@dataclass
class Verdict:
    ok: bool
    reason: str = ""
    order: list[int] = field(default_factory=list)
    """Indexes (into the history) of the operations in a valid order, when ok."""
    explored: int = 0

    def __bool__(self) -> bool:
        return self.ok


def _apply(state: State, ops: KvOps) -> State:
    d = dict(state)
    for k, v in ops:
        if v is None:
            d.pop(k, None)
        else:
            d[k] = v
    return tuple(sorted(d.items()))


def _explains(state: State, op: Op) -> bool:
    assert op.read is not None
    d = dict(state)
    if op.read_all and set(d) - set(op.read):
        return False
    return all(d.get(k) == v for k, v in op.read.items())


def check(
    history: Sequence[Op],
    *,
    strong: Collection[str] | bool = True,
    prefix: bool = False,
    initial: Mapping[bytes, bytes] | None = None,
    max_states: int = 2_000_000,
) -> Verdict:
    """Whether ``history`` has a valid order (see module docstring).

    ``strong``: the processes whose operations obey real time (True: all;
    False: none, i.e. sequential consistency only).
    """
    ops: list[tuple[int, Op]] = []
    for i, op in enumerate(history):
        if not op.ok:
            continue  # failed for certain: must not be visible, so it never takes effect
        if op.is_read and op.ret is None:
            continue  # a read that never returned tells nothing
        ops.append((i, op))
    procs: dict[str, list[int]] = {}
    for j, (_, op) in enumerate(ops):
        procs.setdefault(op.process, []).append(j)
    names = sorted(procs)
    chains = [procs[p] for p in names]
    strong_set: Collection[str] = () if isinstance(strong, bool) else strong
    is_strong = [strong is True or op.process in strong_set for _, op in ops]
    eff_ret = [
        op.ret if op.ret is not None else (op.deadline if op.deadline is not None else math.inf)
        for _, op in ops
    ]
    required = [op.ret is not None for _, op in ops]
    start: State = tuple(sorted((initial or {}).items()))
    # Real time: a strong op may go next only if no undone strong op returned before its call.
    strong_ids = sorted((j for j in range(len(ops)) if is_strong[j]), key=lambda j: eff_ret[j])

    def rt_ok(j: int, heads: tuple[int, ...], done: int) -> bool:
        if not is_strong[j]:
            return True
        call = ops[j][1].call
        for s in strong_ids:
            if eff_ret[s] >= call:
                return True
            if s != j and not done >> s & 1:
                return False
        return True

    def take_reads(
        heads: tuple[int, ...], done: int, state: State, order: tuple[int, ...]
    ) -> tuple[tuple[int, ...], int, tuple[int, ...]]:
        # A read changes nothing, so taking it as soon as it is explained and allowed is
        # never worse than taking it later: it only frees the ops after it. Doing so
        # greedily keeps the readers' positions out of the search's branching.
        moved = True
        while moved:
            moved = False
            for p, chain in enumerate(chains):
                h = heads[p]
                while h < len(chain):
                    j = chain[h]
                    op = ops[j][1]
                    if not op.is_read or not rt_ok(j, heads, done) or not _explains(state, op):
                        break
                    done |= 1 << j
                    order = (*order, j)
                    h += 1
                    heads = (*heads[:p], h, *heads[p + 1 :])
                    moved = True
        return heads, done, order

    seen: set[tuple[tuple[int, ...], State]] = set()
    # Depth-first: a frame is (positions in each chain, done bitmask, state, order so far).
    stack: list[tuple[tuple[int, ...], int, State, tuple[int, ...]]] = [
        (tuple(0 for _ in chains), 0, start, ())
    ]
    explored = 0
    best_depth, best_reason = -1, "no valid order"
    while stack:
        heads, done, state, order = stack.pop()
        heads, done, order = take_reads(heads, done, state, order)
        key = (heads, state)
        if key in seen:
            continue
        seen.add(key)
        explored += 1
        if explored > max_states:
            return Verdict(
                False, f"search gave up after {max_states} states (history too concurrent)", [], explored
            )
        if all(h == len(c) for h, c in zip(heads, chains, strict=True)):
            return Verdict(True, "", [ops[j][0] for j in order], explored)
        moved = False
        for p, chain in enumerate(chains):
            h = heads[p]
            if h == len(chain):
                continue
            j = chain[h]
            op = ops[j][1]
            nxt = (*heads[:p], h + 1, *heads[p + 1 :])
            if not required[j]:
                # It may never have happened: skip it (and, for a prefix, the rest of its chain).
                if prefix:
                    rest = chain[h:]
                    if all(not required[r] for r in rest):
                        skip_done = done
                        for r in rest:
                            skip_done |= 1 << r
                        stack.append(((*heads[:p], len(chain), *heads[p + 1 :]), skip_done, state, order))
                        moved = True
                else:
                    stack.append((nxt, done | 1 << j, state, order))
                    moved = True
            if not rt_ok(j, heads, done):
                continue
            if op.is_read:
                if not _explains(state, op):
                    depth = len(order)
                    if depth > best_depth:
                        best_depth = depth
                        best_reason = (
                            f"op #{ops[j][0]} ({op.process} {op.label or 'read'}) saw {_fmt(op.read)} "
                            f"but after {depth} op(s) the state is {_fmt(dict(state))}"
                        )
                    continue
                stack.append((nxt, done | 1 << j, state, (*order, j)))
            else:
                stack.append((nxt, done | 1 << j, _apply(state, op.writes), (*order, j)))
            moved = True
        if not moved and len(order) > best_depth:
            best_depth, best_reason = (
                len(order),
                f"stuck after {len(order)} op(s): real-time order cannot be met",
            )
    return Verdict(False, best_reason, [], explored)


def _fmt(d: Mapping[bytes, bytes | None] | None) -> str:
    if d is None:
        return "?"
    parts = []
    for k in sorted(d):
        v = d[k]
        parts.append(f"{k.decode('latin-1')}={'<absent>' if v is None else v[:12].decode('latin-1')}")
    return "{" + ", ".join(parts) + "}"


def check_linearizable(history: Sequence[Op], **kw: object) -> Verdict:
    """Every process strong: linearizability."""
    return check(history, strong=True, **kw)  # type: ignore[arg-type]


def check_sequential(history: Sequence[Op], **kw: object) -> Verdict:
    """No process strong: sequential consistency."""
    return check(history, strong=False, **kw)  # type: ignore[arg-type]


class PrefixViolation(AssertionError):
    """An observed state is no prefix of the write history, or a reader went back."""


def prefix_positions(
    digests: Sequence[str],
    observations: Sequence[tuple[str, int]],
    *,
    start: int = 0,
) -> list[int]:
    """For a single writer's history: ``digests[i]`` is the digest of the contents after
    the first ``i`` writes; each observation is ``(digest, upper)`` where ``upper`` is
    how many writes had been issued when the observation was made (a reader cannot
    see a write not yet issued). Returns, per observation, the smallest prefix
    length it equals that does not go back from the previous one (starting at
    ``start``); raises :class:`PrefixViolation` otherwise."""
    where: dict[str, list[int]] = {}
    for i, d in enumerate(digests):
        where.setdefault(d, []).append(i)
    out: list[int] = []
    pos = start
    for n, (d, upper) in enumerate(observations):
        cands = [i for i in where.get(d, []) if pos <= i <= upper]
        if not cands:
            if d not in where:
                raise PrefixViolation(f"observation {n}: a state that no prefix of the writes produces")
            raise PrefixViolation(
                f"observation {n}: the state equals prefix(es) {where[d]} only, outside [{pos}, {upper}]"
                " (the reader went back, or saw a write before it was issued)"
            )
        pos = cands[0]
        out.append(pos)
    return out


def digests_of_prefixes(
    base: Mapping[bytes, bytes], writes: Sequence[KvOps], digest: Callable[[list[tuple[bytes, bytes]]], str]
) -> list[str]:
    """``digest`` of the contents after each prefix of ``writes`` applied to ``base``."""
    d = dict(base)
    out = [digest(list(d.items()))]
    for w in writes:
        for k, v in w:
            if v is None:
                d.pop(k, None)
            else:
                d[k] = v
        out.append(digest(list(d.items())))
    return out


__all__ = [
    "Op",
    "PrefixViolation",
    "Verdict",
    "check",
    "check_linearizable",
    "check_sequential",
    "digests_of_prefixes",
    "prefix_positions",
]
