"""The standalone compactor's role lease: a second compactor stands by instead of fencing.

Why: opening a compactor bumps ``compactor_epoch`` and so fences the one before it. Two
standalone compactors of one database (a restart-always supervisor, or two run for
availability) fenced each other in a loop: each start fenced the running one, which exited,
was restarted, and fenced the other, a manifest version and a lost job each time.

How: after claiming epoch E a standalone compactor writes ``compactions/<E>.role`` (who
holds the role, since when, ``renewed_s``, ``lease_s``, ``serving``) and rewrites it every
quarter of ``CompactorOptions.role_lease_s``, idle or in a job. ``serving`` is true while
it runs as a service (``Compactor.run``, ``run-compactor`` without ``--once``), from the first
write of one opened to serve (``Compactor.open(serve=True)``): only such a holder is stood by
for. A one-off (``run_once``, ``--once``, a Spark compaction) is fenced
as before, so ``Compactor.open(url).run_once()`` twice in one process, the first never
closed, still compacts twice. A lease per epoch, not one shared
object: a holder that was fenced but has not noticed yet can only rewrite its own, never
the new holder's. Another standalone compactor reads the latest manifest and the lease of
its ``compactor_epoch``; while that lease is live it stands by (one manifest probe and one
GET every quarter of ``role_lease_s``) and claims the role when it is not.

A lease is live unless: the epoch was released (its holder closed), the object is absent
(the holder is a writer's embedded compactor, a Spark or ``--once`` run, or an older
shaledb: the rule of docs/compaction-gc.md stands, a standalone compactor takes the role
from those at once), it was not renewed within ``lease_s`` by the holder's wall clock, or
its body has not changed for ``lease_s`` of the standby's own monotonic clock (a holder
whose clock runs ahead still lapses). A holder on this host and in this PID namespace
whose process is gone (killed, then restarted by systemd) has lapsed at once, and so has
one that names this very process but no compactor of it that still runs. An unrenewed
lease is not lapsed while this process's own store failed within half a lease: an outage
hides the holder's renewals from it as much as it keeps the holder from making them.

Races between standbys: a standby's claim is conditional on the epoch it saw lapse
(``ClaimCompactorEpoch(lapsed=...)``), so of two that saw one lapse only the first claims
and the other stands by for it; and a standby that watched the role change hands gives an
epoch without a lease ``role_lease_s`` to get one (:meth:`Standby.live_holder`), as the
claimer writes it just after its manifest CAS.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from dataclasses import dataclass
from datetime import UTC, datetime

from ..clock import Clock
from ..errors import ObjectNotFound, ShaleError
from ..format import paths
from ..manifest.model import Manifest
from ..manifest.options import OPT_COMPACTOR_RELEASED
from ..store.base import ObjectStore
from ..store.retrying import RetryingStore
from ..store.wrappers import find_wrapper

_LIVE_HERE: set[str] = set()
"""Tokens of the role leases of this process's compactors that serve (are in ``run``)."""
_LIVE_LOCK = threading.Lock()


def _pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def _pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # EPERM: it exists, someone else's
        return False
    return False


@dataclass(frozen=True)
class Holder:
    """What a role lease says about the compactor holding the role."""

    epoch: int
    host: str
    pid: int
    pidns: int
    token: str
    since_s: float
    renewed_s: float
    lease_s: float
    serving: bool

    def describe(self) -> str:
        if not self.host:  # Standby.live_holder's stand-in for a claim whose lease is not written yet
            return f"compactor epoch {self.epoch} (just claimed; no role lease yet)"
        since = datetime.fromtimestamp(self.since_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return f"compactor epoch {self.epoch} (host {self.host}, pid {self.pid}) since {since}"

    def dead_here(self) -> bool:
        """Whether this lease's process is known gone (same host and PID namespace)."""
        if self.host != socket.gethostname() or self.pidns != _pid_namespace():
            return False
        if self.pid == os.getpid():
            with _LIVE_LOCK:
                return self.token not in _LIVE_HERE
        return _pid_gone(self.pid)


def parse_holder(data: bytes) -> Holder | None:
    """The holder a role lease names, None if the bytes are not one."""
    try:
        b = json.loads(data)
        h = Holder(
            int(b["epoch"]),
            str(b["host"]),
            int(b["pid"]),
            int(b["pidns"]),
            str(b["token"]),
            float(b["since_s"]),
            float(b["renewed_s"]),
            float(b["lease_s"]),
            b.get("serving") is True,
        )
    except (ValueError, KeyError, TypeError, OverflowError):
        return None
    return h if 0 < h.lease_s < float("inf") else None


class Renewed:
    """A lease object rewritten whole to renew it, at most once per quarter of ``lease_s``
    however often :meth:`beat` is called (a job's lease, a standalone compactor's role lease):
    a holder three renewals late is still live, and a busy loop costs no extra PUTs."""

    def __init__(self, store: ObjectStore, clock: Clock, path: str, lease_s: float) -> None:
        self.store = store
        self.clock = clock
        self.path = path
        self.lease_s = lease_s
        self._last = 0.0
        self._lock = threading.Lock()

    def body(self) -> dict[str, object]:
        """The lease's fields but ``renewed_s`` (docs/format/leases.md)."""
        raise NotImplementedError

    def _write(self) -> None:
        data = {**self.body(), "renewed_s": self.clock.now()}
        self.store.put(self.path, json.dumps(data, sort_keys=True).encode())
        self._last = self.clock.monotonic()

    def beat(self) -> None:
        """Renew if a quarter of the lease has passed (cheap to call often)."""
        if self.clock.monotonic() - self._last >= self.lease_s / 4:
            with self._lock:
                if self.clock.monotonic() - self._last >= self.lease_s / 4:
                    self._write()


class RoleLease(Renewed):
    """The lease a standalone compactor keeps while it holds epoch ``epoch``."""

    def __init__(
        self,
        store: ObjectStore,
        clock: Clock,
        epoch: int,
        lease_s: float,
        token: str,
        *,
        serving: bool = False,
    ) -> None:
        """``serving``: claimed by a compactor already in ``run`` (a standby taking over) or
        opened to run (``Compactor.open(serve=True)``, ``run-compactor`` without ``--once``).
        Its first write says so: written as not serving, then rewritten, a standby polling
        between the two took it for a one-off run and fenced it."""
        super().__init__(store, clock, paths.role_lease_path(epoch), float(lease_s))
        self.fields: dict[str, object] = {
            "epoch": epoch,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "pidns": _pid_namespace(),
            "token": token,
            "since_s": clock.now(),
            "lease_s": float(lease_s),
            "serving": serving,
        }
        if serving:
            with _LIVE_LOCK:
                _LIVE_HERE.add(token)
        self._write()

    def body(self) -> dict[str, object]:
        return self.fields

    def serve(self, serving: bool) -> None:
        """Say (at once) whether the holder runs as a service, which a standby waits for."""
        if self.fields["serving"] is serving:
            return  # (claimed while serving: the first write said so)
        token = str(self.fields["token"])
        with _LIVE_LOCK:
            if serving:
                _LIVE_HERE.add(token)
            else:
                _LIVE_HERE.discard(token)
        with self._lock:
            self.fields["serving"] = serving
            self._write()

    def drop(self) -> None:
        """Remove the lease (the role was released or taken over); failures only log."""
        with _LIVE_LOCK:
            _LIVE_HERE.discard(str(self.fields["token"]))
        try:
            self.store.delete(self.path)
        except ShaleError:
            pass  # the GC does not need it gone: a stale lease protects nothing


class Standby:
    """Decides, poll by poll, whether a live standalone compactor holds the role."""

    def __init__(self, store: ObjectStore, clock: Clock) -> None:
        self.store = store
        self.clock = clock
        self._seen: tuple[str, bytes, float] | None = None
        """(path, body, monotonic time first seen) of the last lease read."""
        self._bare: tuple[int, float, float] | None = None
        """(epoch, monotonic and wall time first seen) of the last epoch seen without a lease."""
        self._retrying: RetryingStore | None = find_wrapper(store, RetryingStore)
        """Where this process's store failures are seen (:meth:`_store_failed_lately`)."""

    def _store_failed_lately(self, lease_s: float) -> bool:
        """Whether this process's store failed within half a lease: an outage seen here was
        most likely seen by the holder too, which could not renew through it and renews
        within a quarter of ``lease_s`` once the store answers. Before, a standby (or a
        writer's embedded compactor) whose first read after a 25 s outage found the lease
        unrenewed took the role and fenced a healthy standalone compactor."""
        return self._retrying is not None and self._retrying.seconds_since_failure() < lease_s / 2

    def state(self, m: Manifest) -> tuple[str, Holder | None]:
        """Who holds ``m``'s compactor epoch: ``("live", holder)``; ``("lapsed", holder)``
        (crashed or killed); ``("none", ...)`` (no role lease: an embedded compactor or
        an older shaledb holds it; or a one-off run does) or ``("released", None)`` (nobody)."""
        epoch = m.compactor_epoch
        if epoch == 0 or m.option(OPT_COMPACTOR_RELEASED) == str(epoch):
            return "released", None
        path = paths.role_lease_path(epoch)
        try:
            data = self.store.get(path)
        except ObjectNotFound:
            return "none", None
        h = parse_holder(data)
        if h is None or h.epoch != epoch:
            return "lapsed", None
        if not h.serving:
            return "none", h
        mono = self.clock.monotonic()
        if self._seen is None or self._seen[:2] != (path, data):
            self._seen = (path, data, mono)
        stale = self.clock.now() > h.renewed_s + h.lease_s or mono - self._seen[2] > h.lease_s
        if h.dead_here():
            return "lapsed", h
        return ("lapsed" if stale and not self._store_failed_lately(h.lease_s) else "live"), h

    def live_holder(self, m: Manifest, grace_s: float = 0.0) -> Holder | None:
        """The live standalone compactor holding ``m``'s epoch, None if the role may be claimed.

        ``grace_s`` (a standby that watched the role change hands): an epoch without a role
        lease is a claim in progress -- another standby or ``--takeover`` bumped the epoch and
        is about to write its lease -- for ``grace_s`` of this standby's own monotonic clock
        from when it first saw that epoch so; a stand-in :class:`Holder` (empty ``host``) says
        so. Before, a standby polling in that window fenced the new holder at once. Past the
        grace it is lapsed (the claimer died, or is an embedded compactor, a Spark or
        ``--once`` run or an older shaledb, which keep no lease)."""
        state, h = self.state(m)
        if state == "live":
            return h
        if state != "none" or h is not None or grace_s <= 0:
            return None
        mono, epoch = self.clock.monotonic(), m.compactor_epoch
        if self._bare is None or self._bare[0] != epoch:
            self._bare = (epoch, mono, self.clock.now())
        if mono - self._bare[1] > grace_s:
            return None
        return Holder(epoch, "", 0, 0, "", self._bare[2], self._bare[2], grace_s, True)


__all__ = ["Holder", "Renewed", "RoleLease", "Standby", "parse_holder"]
