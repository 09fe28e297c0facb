"""Fault injection at the store interface, and simulated crashes.

Faults are injected where the engine meets storage, so every run is
reproducible from a seed (SlateDB's ``FailingObjectStore``, pebble's
``errorfs``). A :class:`FaultInjectingStore` wraps any store and consults its
rules before every call; the first rule that selects the call decides what
happens:

* ``fail_before`` -- raise :class:`~shaledb.errors.Unavailable`; nothing applied;
* ``apply_then_fail`` -- perform the call, then raise ``Unavailable``: the
  ambiguous outcome of a request whose response was lost;
* ``crash`` / ``apply_then_crash`` -- raise :class:`SimulatedCrash` (before or
  after applying), and from then on every call through this wrapper raises it,
  so a "crashed" process's background threads cannot touch the store again.
  The test then reopens on the inner store, as a new process would.

Rules select by operation kind (see :data:`~shaledb.store.wrappers.OP_KINDS`,
plus the aliases in :data:`OP_ALIASES`), path prefix or regex, the n-th
matching call, and a seeded probability. Every call is logged as
``Call(op, path)`` so a test can enumerate the store calls of an operation and
then crash at each one in turn.
"""

from __future__ import annotations

import random
import re
import threading
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Literal, NoReturn, TypeVar

from ..errors import InvalidArgument, Unavailable
from ..format.paths import check_relative_path
from ..store.base import ObjectMeta, ObjectStore
from ..store.wrappers import OP_KINDS, StoreWrapper

T = TypeVar("T")
Action = Literal["fail_before", "apply_then_fail", "crash", "apply_then_crash"]
ACTIONS: tuple[str, ...] = ("fail_before", "apply_then_fail", "crash", "apply_then_crash")

OP_ALIASES: Mapping[str, frozenset[str]] = {
    "put": frozenset({"put", "put_create"}),
    "copy": frozenset({"copy", "copy_create"}),
    "create": frozenset({"put_create", "copy_create"}),
    "read": frozenset({"get", "get_range", "get_ranges", "head", "attributes", "list"}),
    "delete": frozenset({"delete", "delete_many"}),
    "write": frozenset({"put", "put_create", "delete", "delete_many", "copy", "copy_create"}),
}
"""Names a rule may use for several kinds: ``put`` covers conditional puts too, ``delete``
bulk deletes."""


class SimulatedCrash(BaseException):
    """The process "died" at a store call.

    A BaseException, so ``except Exception`` handlers in the engine cannot
    swallow it and carry on as if the process were alive.
    """


@dataclass(frozen=True, slots=True)
class Call:
    """One store call as the fault injector saw it (``src`` only for copies)."""

    op: str
    path: str
    src: str | None = None


def _expand_ops(ops: Collection[str] | str | None) -> frozenset[str] | None:
    if ops is None:
        return None
    names = [ops] if isinstance(ops, str) else list(ops)
    out: set[str] = set()
    for name in names:
        if name in OP_ALIASES:
            out |= OP_ALIASES[name]
        elif name in OP_KINDS:
            out.add(name)
        else:
            raise InvalidArgument(
                f"unknown operation {name!r}; use one of {OP_KINDS} or {sorted(OP_ALIASES)}"
            )
    return frozenset(out)


@dataclass(eq=False)
class FaultRule:
    """Which calls to break, and how. All given selectors must match.

    ``nth`` fires on the n-th matching call only (1-based); ``probability``
    fires each matching call with that chance (drawn from the store's seeded
    RNG); ``times`` caps how often the rule fires. ``matched`` and ``fired``
    count what happened, so a test can prove its fault path ran; for the
    ``apply_then_*`` actions ``applied`` counts the selected calls that took
    effect (a create that met an existing object fired, but applied nothing).
    """

    action: Action
    ops: frozenset[str] | None = None
    path_prefix: str | None = None
    path_regex: re.Pattern[str] | None = None
    nth: int | None = None
    probability: float | None = None
    times: int | None = None
    matched: int = field(default=0, init=False)
    fired: int = field(default=0, init=False)
    applied: int = field(default=0, init=False)

    def selects(self, call: Call) -> bool:
        if self.ops is not None and call.op not in self.ops:
            return False
        if self.path_prefix is not None and not call.path.startswith(self.path_prefix):
            return False
        return self.path_regex is None or self.path_regex.search(call.path) is not None


class FaultInjectingStore(StoreWrapper):
    """Wraps ``inner`` and breaks the calls its rules select.

    ``seed`` seeds the RNG behind probabilistic rules; when omitted one is
    drawn and printed, so a failing run can be replayed (pytest shows captured
    output of failed tests).
    """

    def __init__(self, inner: ObjectStore, seed: int | None = None) -> None:
        super().__init__(inner)
        if seed is None:
            seed = random.SystemRandom().randrange(2**32)
            print(f"FaultInjectingStore seed={seed}")
        self.seed = seed
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = []
        self._calls: list[Call] = []
        self._crashed = False

    def __repr__(self) -> str:
        return f"FaultInjectingStore({self.inner!r}, seed={self.seed})"

    # -- configuration ---------------------------------------------------------------------

    def add_rule(
        self,
        action: Action,
        *,
        ops: Collection[str] | str | None = None,
        path_prefix: str | None = None,
        path_regex: str | None = None,
        nth: int | None = None,
        probability: float | None = None,
        times: int | None = None,
    ) -> FaultRule:
        """Add a rule (checked after the earlier ones) and return it."""
        if action not in ACTIONS:
            raise InvalidArgument(f"unknown fault action {action!r}; use one of {ACTIONS}")
        if nth is not None and nth < 1:
            raise InvalidArgument("nth counts matching calls from 1")
        if probability is not None and not 0.0 <= probability <= 1.0:
            raise InvalidArgument("probability must be within [0, 1]")
        rule = FaultRule(
            action=action,
            ops=_expand_ops(ops),
            path_prefix=path_prefix,
            path_regex=re.compile(path_regex) if path_regex is not None else None,
            nth=nth,
            probability=probability,
            times=times,
        )
        with self._lock:
            self._rules.append(rule)
        return rule

    def clear_rules(self) -> None:
        with self._lock:
            self._rules.clear()

    def crash(self) -> None:
        """Crash now: every later call raises :class:`SimulatedCrash`."""
        with self._lock:
            self._crashed = True

    @property
    def crashed(self) -> bool:
        return self._crashed

    @property
    def calls(self) -> list[Call]:
        """A copy of the call log, in call order."""
        with self._lock:
            return list(self._calls)

    def clear_calls(self) -> None:
        with self._lock:
            self._calls.clear()

    def count_calls(self, ops: Collection[str] | str | None = None, path_prefix: str = "") -> int:
        """Logged calls of ``ops`` (names or :data:`OP_ALIASES`; None: all) on paths starting
        with ``path_prefix``: what a request-cost test asks ("GETs of WAL objects")."""
        wanted = _expand_ops(ops)
        with self._lock:
            return sum(
                1
                for c in self._calls
                if (wanted is None or c.op in wanted) and c.path.startswith(path_prefix)
            )

    # -- the decision ----------------------------------------------------------------------

    def _crash_error(self, call: Call) -> SimulatedCrash:
        return SimulatedCrash(f"simulated crash at {call.op} {call.path} (seed={self.seed})")

    def _decide(self, call: Call) -> FaultRule | None:
        with self._lock:
            if self._crashed:
                raise self._crash_error(call)
            self._calls.append(call)
            for rule in self._rules:
                if not rule.selects(call):
                    continue
                rule.matched += 1
                if rule.times is not None and rule.fired >= rule.times:
                    continue
                if rule.nth is not None and rule.matched != rule.nth:
                    continue
                if rule.probability is not None and self._rng.random() >= rule.probability:
                    continue
                if rule.action == "crash":
                    rule.fired += 1
                    self._crashed = True
                    raise self._crash_error(call)
                if rule.action == "fail_before":
                    rule.fired += 1
                    raise Unavailable(f"injected failure before {call.op} {call.path} (seed={self.seed})")
                return rule  # fires in _after, once the call was applied
            return None

    def _inject(
        self, rule: FaultRule, call: Call, applied: bool, cause: BaseException | None = None
    ) -> NoReturn:
        """Raise the ``apply_then_*`` fault after the call ran (whatever its outcome).

        A lost response is ambiguous whether the store answered success or an
        error, so the fault replaces either; ``applied`` counts the calls that
        actually took effect.
        """
        with self._lock:
            rule.fired += 1
            if applied:
                rule.applied += 1
            if rule.action == "apply_then_crash":
                self._crashed = True
        if rule.action == "apply_then_fail":
            raise Unavailable(
                f"injected failure after {call.op} {call.path} was sent (seed={self.seed})"
            ) from cause
        raise self._crash_error(call) from cause

    def _run(self, call: Call, fn: Callable[[], T]) -> T:
        rule = self._decide(call)
        if rule is None:
            return fn()
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - any outcome, then the fault
            self._inject(rule, call, applied=False, cause=exc)
        self._inject(rule, call, applied=True)

    # -- the store -------------------------------------------------------------------------

    def get(self, path: str) -> bytes:
        return self._run(Call("get", path), lambda: self.inner.get(path))

    def get_range(self, path: str, start: int, end: int) -> bytes:
        return self._run(Call("get_range", path), lambda: self.inner.get_range(path, start, end))

    def get_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        return self._run(Call("get_ranges", path), lambda: self.inner.get_ranges(path, ranges))

    def head(self, path: str) -> ObjectMeta:
        return self._run(Call("head", path), lambda: self.inner.head(path))

    def attributes(self, path: str) -> dict[str, str]:
        return self._run(Call("attributes", path), lambda: self.inner.attributes(path))

    def put(
        self,
        path: str,
        data: bytes | bytearray | memoryview,
        *,
        create: bool = False,
        attributes: Mapping[str, str] | None = None,
    ) -> None:
        call = Call("put_create" if create else "put", path)
        self._run(call, lambda: self.inner.put(path, data, create=create, attributes=attributes))

    def list(self, prefix: str, *, offset: str | None = None) -> Iterator[ObjectMeta]:
        call = Call("list", prefix)
        rule = self._decide(call)
        if rule is None:
            return self._guarded(self.inner.list(prefix, offset=offset), call)
        try:
            for _ in self.inner.list(prefix, offset=offset):
                pass
        except Exception as exc:  # noqa: BLE001 - any outcome, then the fault
            self._inject(rule, call, applied=False, cause=exc)
        self._inject(rule, call, applied=True)

    def _guarded(self, stream: Iterator[ObjectMeta], call: Call) -> Iterator[ObjectMeta]:
        # A listing still being consumed when the process "crashes" must stop too.
        for meta in stream:
            if self._crashed:
                raise self._crash_error(call)
            yield meta

    def delete(self, path: str) -> None:
        self._run(Call("delete", path), lambda: self.inner.delete(path))

    def delete_many(self, paths: Sequence[str]) -> None:
        # One call per path, in order: a fault at one leaves the earlier ones deleted and
        # the later ones not, which is one of the outcomes a failed bulk delete may have.
        for path in paths:
            check_relative_path(path)
        for path in paths:
            self._run(Call("delete_many", path), partial(self.inner.delete, path))

    def copy(self, src: str, dst: str, *, create: bool = False) -> None:
        call = Call("copy_create" if create else "copy", dst, src)
        self._run(call, lambda: self.inner.copy(src, dst, create=create))


class OnFirstGet(StoreWrapper):
    """Runs ``action`` once, just before the first GET of ``path`` (which then reads as usual):
    puts one role's work (a writer's, a collector's) between another's steps, at an exact call."""

    def __init__(self, inner: ObjectStore, path: str, action: Callable[[], None]) -> None:
        super().__init__(inner)
        self._path = path
        self._action: Callable[[], None] | None = action

    def get(self, path: str) -> bytes:
        if path == self._path and self._action is not None:
            action, self._action = self._action, None
            action()
        return self.inner.get(path)
