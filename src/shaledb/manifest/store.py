"""Reading and writing manifests with create-if-absent as the only CAS.

Update protocol (see docs/design/manifest-and-fencing.md): read the latest manifest, apply the
change, check fencing, check invariants, write ``id + 1`` with
create-if-absent; on a conflict re-read and re-apply until the timeout. A
fenced process gets ``FencedError`` (never a silent, logged-and-lost update).

One more check closes an ABA hole: a process stalled for a long time could
create ``manifest/<id+1>`` after the garbage collector deleted that old
version, and its write would "succeed" while the database has moved on. So
after every successful create we list newer manifests; if any exists our
object is not the head of the chain and the update is retried from the
latest version (the stray object is left for GC, it is never read as latest).

Newer manifests also exist when other processes simply built on ours between
our create and our listing. Retrying then would apply the change twice (an L0
SST added twice, an epoch bumped twice). Every manifest therefore records the
nonce of the version it was derived from (``prev_nonce``): if the manifest
right after ours names our nonce, ours is in the chain and the write stands.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from dataclasses import replace

from ..clock import Clock
from ..errors import AlreadyExists, ConflictError, CorruptionError, NotFound, ObjectNotFound, Unavailable
from ..format import paths
from ..format.manifest import decode_manifest_body, encode_manifest_body
from ..numbers import check_seconds
from ..store.base import ObjectStore
from .edits import Edit
from .invariants import check_transition
from .model import Manifest, from_body, to_body

log = logging.getLogger("shaledb.manifest")

LIST_FALLBACK_PROBES = 16
"""Probe at most this many versions ahead before listing instead."""
LIST_FALLBACK_INTERVAL_S = 60.0
"""When probing finds nothing newer, still list this often (seconds) to cross GC gaps."""


class ManifestStore:
    """Manifest I/O for one database root. Thread-safe."""

    def __init__(self, store: ObjectStore, clock: Clock, rng: random.Random, *, author: str) -> None:
        self.store = store
        self.clock = clock
        self.rng = rng
        self.author = author
        self._lock = threading.Lock()
        self._latest_id: int | None = None
        self._last_list = clock.monotonic()
        self._cache: dict[int, Manifest] = {}
        self._nonces: dict[int, tuple[str | None, str | None]] = {}
        """(nonce, prev_nonce) of manifests read or written, by id (bounded)."""

    # ------------------------------------------------------------------ reads

    def _decode(self, manifest_id: int, data: bytes) -> Manifest:
        path = paths.manifest_path(manifest_id)
        try:
            body = decode_manifest_body(data)
            m = from_body(body, path)
        except CorruptionError as exc:
            raise exc.with_path(path) from exc
        if m.id != manifest_id:
            raise CorruptionError(f"manifest body says id {m.id}", path)
        nonce, prev = body.get("nonce"), body.get("prev_nonce")
        self._note_nonces(
            manifest_id, nonce if isinstance(nonce, str) else None, prev if isinstance(prev, str) else None
        )
        return m

    def _note_nonces(self, manifest_id: int, nonce: str | None, prev: str | None) -> None:
        with self._lock:
            if len(self._nonces) > 1024:
                self._nonces.pop(min(self._nonces))
            self._nonces[manifest_id] = (nonce, prev)

    def _follows(self, manifest_id: int, nonce: str) -> bool:
        """True if manifest ``manifest_id + 1`` was derived from ours (see module docstring)."""
        try:
            self.read(manifest_id + 1)
        except ObjectNotFound:
            return False
        with self._lock:
            link = self._nonces.get(manifest_id + 1)
        return link is not None and link[1] == nonce

    def read(self, manifest_id: int) -> Manifest:
        """Manifest ``manifest_id``; ObjectNotFound if it does not exist."""
        with self._lock:
            cached = self._cache.get(manifest_id)
        if cached is not None:
            return cached
        m = self._decode(manifest_id, self.store.get(paths.manifest_path(manifest_id)))
        with self._lock:
            if len(self._cache) > 64:
                self._cache.pop(min(self._cache))
            self._cache[manifest_id] = m
        return m

    def list_ids(self, *, after: int | None = None) -> list[int]:
        """Ids of the manifest objects present, ascending."""
        offset = paths.manifest_path(after) if after is not None else None
        ids = []
        for meta in self.store.list(paths.MANIFEST_DIR, offset=offset):
            mid = paths.parse_manifest_id(meta.path)
            if mid is not None:
                ids.append(mid)
        ids.sort()
        return ids

    def latest_id(self) -> int | None:
        ids = self.list_ids()
        return ids[-1] if ids else None

    def read_latest(self) -> Manifest | None:
        """The manifest with the highest id, or None for an empty root.

        Listing and reading race with GC deleting old versions, so a listed id
        that has vanished is retried; the highest id is never deleted.
        """
        for _ in range(20):
            latest = self.latest_id()
            if latest is None:
                return None
            try:
                m = self.read(latest)
            except ObjectNotFound:
                continue
            with self._lock:
                self._latest_id = max(self._latest_id or 0, m.id)
            return m
        raise Unavailable("manifest listing keeps changing; giving up")

    def refresh(self, current: Manifest) -> Manifest:
        """The latest manifest, probing ``current.id + 1, + 2, ...`` with GETs.

        Probing costs one GET per poll when nothing changed (cheaper than a
        LIST on S3) and falls back to listing if the chain looks broken.
        """
        m = current
        for _ in range(LIST_FALLBACK_PROBES):
            try:
                m = self.read(m.id + 1)
            except ObjectNotFound:
                break
        else:
            return self._listed_latest(m)
        # Nothing newer by probing. GC may have deleted versions after ours (a
        # process that stalled longer than the GC's minimum age), leaving a gap
        # no probe crosses, so list now and then to find the real head.
        now = self.clock.monotonic()
        if now - self._last_list >= LIST_FALLBACK_INTERVAL_S:
            return self._listed_latest(m)
        return m

    def _listed_latest(self, m: Manifest) -> Manifest:
        self._last_list = self.clock.monotonic()
        latest = self.read_latest()
        return latest if latest is not None and latest.id > m.id else m

    def require_latest(self) -> Manifest:
        m = self.read_latest()
        if m is None:
            raise NotFound(f"no database at {self.store.describe()}")
        return m

    # ----------------------------------------------------------------- writes

    def _encode(self, m: Manifest, current: Manifest | None) -> tuple[bytes, str, str | None]:
        nonce = f"{self.rng.getrandbits(128):032x}"
        body = to_body(m, nonce=nonce, author=self.author)
        with self._lock:
            link = self._nonces.get(current.id) if current is not None else None
        prev = link[0] if link is not None else None
        if prev is not None:
            body["prev_nonce"] = prev
        return encode_manifest_body(body), nonce, prev

    def write_new(self, m: Manifest, current: Manifest | None) -> Manifest:
        """Create manifest ``m.id``; ConflictError if taken or not the head."""
        check_transition(current, m)
        data, nonce, prev = self._encode(m, current)
        path = paths.manifest_path(m.id)
        try:
            self.store.put(path, data, create=True)
        except AlreadyExists as exc:
            raise ConflictError(f"manifest {m.id} already exists") from exc
        self._note_nonces(m.id, nonce, prev)
        newer = self.list_ids(after=m.id)
        if newer and not self._follows(m.id, nonce):
            log.warning("manifest %d was written behind newer versions %s; retrying", m.id, newer[:3])
            raise ConflictError(f"manifest {m.id} is not the latest (found {newer[0]})")
        with self._lock:
            self._cache[m.id] = m
            self._latest_id = m.id
        return m

    def create_initial(self, m: Manifest) -> Manifest:
        """Write manifest 1 of a new database (ConflictError if one exists)."""
        return self.write_new(replace(m, id=1), None)

    def update(
        self,
        edit: Edit | Callable[[Manifest], Manifest | None],
        *,
        timeout_s: float,
        current: Manifest | None = None,
    ) -> Manifest:
        """Apply ``edit`` (``shaledb.manifest.edits``) to the latest manifest and write the result.

        ``current`` is a hint (the caller's last known version): the first
        attempt tries it, and a conflict refreshes. Returns the manifest
        written, or the latest one unchanged when the edit returns None.
        A plain function is accepted too, for tests that stand in for another
        process's ad hoc change; the package itself passes named edits.
        """
        apply = edit.apply if isinstance(edit, Edit) else edit
        check_seconds("timeout_s", timeout_s)
        deadline = self.clock.monotonic() + timeout_s
        m = current if current is not None else self.require_latest()
        attempt = 0
        while True:
            nxt = apply(m)
            if nxt is None:
                return m
            nxt = replace(nxt, id=m.id + 1)
            try:
                return self.write_new(nxt, m)
            except ConflictError:
                attempt += 1
                if self.clock.monotonic() > deadline:
                    raise Unavailable(
                        f"manifest update did not succeed within {timeout_s}s ({attempt} conflicts)"
                    ) from None
                if attempt > 3:
                    self.clock.sleep(min(0.5, 0.005 * (2 ** min(attempt, 7))) * self.rng.random())
                m = self.require_latest()
