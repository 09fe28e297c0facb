"""The local-directory store: :class:`LocalObstoreStore`, every call an ``os`` call.

It keeps obstore's local store's semantics (paths, listings, e-tags, create-if-absent by
stage and link) and :class:`~.obstore_store.ObstoreStore`'s error vocabulary, but makes no
obstore call: obstore runs local operations on its Rust runtime's threads, which a process
forked by ``os.fork`` (multiprocessing's default start method on Linux) does not inherit, so
a forked child's calls waited forever. Split from :mod:`.obstore_store` to keep both small.
"""

from __future__ import annotations

import builtins
import errno
import logging
import os
import stat
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import obstore

from ..errors import (
    AlreadyExists,
    InvalidArgument,
    InvalidPathError,
    ObjectNotFound,
    ShaleError,
    Unavailable,
)
from ..format.paths import STAGE_DIR, check_prefix, check_relative_path, is_own
from .base import ObjectMeta
from .local_fs import (
    abandoned_stages,
    check_root,
    embedded_errno,
    make_dirs,
    os_error,
    real_root,
    remove_empty_dirs,
    remove_stages,
)
from .obstore_store import ObstoreStore

log = logging.getLogger("shaledb.store.obstore_store")
"""The logger the local store always used (docs/logging.md lists it)."""


_fadvise = getattr(os, "posix_fadvise", None)  # not on macOS or Windows: writes stay cached there
_DONTNEED = getattr(os, "POSIX_FADV_DONTNEED", 4)


_LINK_ITSELF: dict[str, bool] = {"follow_symlinks": False} if os.link in os.supports_follow_symlinks else {}
"""How a copy links a source that is a symbolic link: the link itself, as obstore's (Rust's
``hard_link``); where ``link`` cannot choose, as the system does."""


def _unlink_quietly(stage: str) -> None:
    """Remove a staging file; one left behind is the garbage collector's (``abandoned_stages``)."""
    try:
        os.unlink(stage)
    except OSError:
        log.warning("could not remove staging file %s", stage)


def _os_meta(path: str, st: os.stat_result) -> ObjectMeta:
    """An object's metadata from its ``stat``, as obstore's local store gives it: the time
    in microseconds, the e-tag the inode, those microseconds and the size, in hex."""
    micros = st.st_mtime_ns // 1000
    e_tag = f'"{st.st_ino:x}-{micros:x}-{st.st_size:x}"'
    return ObjectMeta(path=path, size=st.st_size, last_modified=micros / 1e6, e_tag=e_tag)


def _is_stage_name(name: str) -> bool:
    """obstore's rule for names a local listing skips: ``<name>#<digits>`` (a stage)."""
    suffix = name.partition("#")[2]
    return bool(suffix) and suffix.isascii() and suffix.isdigit()


def _write_all(fd: int, view: memoryview) -> None:
    while view:
        view = view[os.write(fd, view) :]


class _OpenFile:
    __slots__ = ("evicted", "fd", "users")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.users = 0
        self.evicted = False


class LocalObstoreStore(ObstoreStore):
    """A local directory; every path is checked to stay inside the real root.

    The root itself is resolved with ``realpath`` when the store is opened;
    each object path is resolved too, so a symlink planted inside the
    directory cannot redirect reads or writes outside it.

    Range reads of immutable objects (SSTs, WAL objects, journal objects,
    a bulk load's staged runs: written once, later only deleted) go straight to
    ``os.pread`` on a cached file descriptor. A point lookup that misses the
    block cache then costs a few microseconds instead of an obstore round trip
    (~100 us), which is what lets random reads of a database larger than the
    cache run at page-cache speed. Descriptors are reference counted, so one
    evicted while another thread reads through it is closed only afterwards;
    a deleted file stays readable through an open descriptor, which is the
    semantics of an object store anyway (GC deletes only unreferenced objects).

    Every other call is ``os`` calls too, the ones obstore's LocalStore makes (stage and
    rename or link, hard-link copies, a ``scandir`` walk): obstore runs them on its
    runtime's blocking threads, which a process forked with ``os.fork`` (multiprocessing's
    default on Linux) does not inherit, so a forked worker's GC, checkpoint, compaction or
    writer waited forever when its parent had used the store seconds before. The obstore
    LocalStore is still made (``inner``) but no call goes through it.
    """

    IMMUTABLE_PREFIXES = ("compacted/", "wal/", "journal/", "tmp/stage/")
    MAX_OPEN_FILES = 256
    DROP_CACHE_PIECE_BYTES = 1 << 20

    def __init__(self, directory: str, *, description: str, drop_cache_min_bytes: int = 0) -> None:
        """``drop_cache_min_bytes``: objects of at least this size (0: none) are
        created without staying in the OS page cache (:meth:`_write_uncached`)."""
        if drop_cache_min_bytes < 0:
            raise InvalidArgument(f"drop_cache_min_bytes must be >= 0, got {drop_cache_min_bytes}")
        self.drop_cache_min_bytes = drop_cache_min_bytes
        real = real_root(directory)
        check_root(real)
        self._real_root = real
        self._lazy: Any = None
        self._lazy_lock = threading.Lock()
        self._checked: dict[str, str] = {}
        self._dirs: dict[str, str] = {}
        self._files: dict[str, _OpenFile] = {}
        self._files_lock = threading.Lock()
        self._outside: set[str] = set()  # directories already warned about (see list)
        super().__init__(None, description=description, sort_listings=True)

    @property
    def directory(self) -> str:
        return self._real_root

    def _root_exists(self) -> bool:
        """Whether the root directory exists. ``os.path.isdir`` answers False when a
        directory above it may not be searched, which made a database this process may
        not read look missing (``NotFound``); that is PermissionDenied."""
        try:
            st = os.stat(self._real_root)
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError as exc:
            raise os_error(exc, self._real_root, self._description, "open the directory") from exc
        return stat.S_ISDIR(st.st_mode)

    def _error(self, exc: BaseException, path: str) -> ShaleError:
        """An OS error keeps its meaning (``shaledb.store.local_fs.os_error``): obstore's local
        store reports a refused permission as a generic error naming ``(os error 13)``,
        which would otherwise be retried as an outage."""
        if isinstance(exc, OSError) and exc.errno is not None:
            return os_error(exc, path, self._description)
        code = embedded_errno(exc)
        if code is not None:
            return os_error(OSError(code, os.strerror(code)), path, self._description)
        return super()._error(exc, path)

    @property
    def _inner(self) -> Any:
        """obstore's LocalStore, made on first use: the root is created by the first
        write only (see ``local_fs``); before that, reads find nothing."""
        return self._lazy if self._lazy is not None else self._open_root(create=False)

    @_inner.setter
    def _inner(self, value: Any) -> None:
        self._lazy = value

    def _open_root(self, *, create: bool) -> Any:
        with self._lazy_lock:
            if self._lazy is None:
                if not self._root_exists():
                    if not create:
                        raise FileNotFoundError(errno.ENOENT, "no database directory", self._real_root)
                    make_dirs(self._real_root, self._description)
                self._lazy = obstore.store.LocalStore(prefix=self._real_root, mkdir=True)
            return self._lazy

    def list(self, prefix: str, *, offset: str | None = None) -> Iterator[ObjectMeta]:
        """A walk with ``os.scandir``, each folder sorted, so objects come in path order
        without collecting them all; what obstore's local listing gives (it would hang in a
        forked child, see :meth:`get`): regular files, through symbolic links, not stages
        (``<name>#<digits>``), metadata as :func:`_os_meta`. Names before ``offset`` or
        outside ``prefix`` cost no ``stat``.

        What lies beyond a symbolic link that leaves the root is not ours, and every other
        call refuses it, so a listing leaves it out too (with a warning); so are names no
        path may have (see ``check_relative_path``), a link that loops back to a folder
        above it, and names that are not UTF-8 (obstore's listing failed on those).
        """
        check_prefix(prefix)
        if offset is not None and not isinstance(offset, str):
            raise InvalidArgument(f"list offset must be a string, got {offset!r}")
        cut = prefix.rfind("/") + 1
        parent, partial = prefix[:cut], prefix[cut:]
        top = os.path.join(self._real_root, *parent.split("/"))
        if not parent:
            return self._walk(top, parent, partial, offset, prefix, via_link=False)
        real = self._dirs.get(parent[:-1]) or os.path.realpath(top)
        return self._walk(top, parent, partial, offset, prefix, via_link=real != os.path.normpath(top))

    def _walk(
        self, here: str, rel: str, partial: str, offset: str | None, prefix: str, *, via_link: bool
    ) -> Iterator[ObjectMeta]:
        """Objects below the folder ``here`` (``rel``: its path relative to the root, ``""``
        or ending in ``/``) whose name in it starts with ``partial``, after ``offset``.
        ``via_link``: a symbolic link led here, so paths are checked with ``_resolve``."""
        try:
            with os.scandir(here) as it:
                found = [
                    (key, e)
                    for e in it
                    if e.name.startswith(partial) and (key := self._entry_key(rel, e)) is not None
                ]
        except (FileNotFoundError, NotADirectoryError):
            return  # nothing there (or gone meanwhile)
        except ShaleError:
            raise
        except OSError as exc:
            raise os_error(exc, prefix, self._description, "list") from None
        found.sort(key=lambda pair: pair[0])
        for key, entry in found:
            path = rel + key
            if offset is not None and offset >= path and not (key[-1] == "/" and offset.startswith(path)):
                continue  # before the offset, and so is everything below it
            link = via_link or entry.is_symlink()
            if key[-1] == "/":
                if self._listable(path[:-1], link, None) and not (link and self._loops(here, entry)):
                    yield from self._walk(entry.path, path, "", offset, prefix, via_link=link)
            elif not _is_stage_name(key) and entry.is_file() and self._listable(path, link, entry.path):
                try:
                    st = entry.stat()
                except (FileNotFoundError, NotADirectoryError):
                    continue  # deleted meanwhile
                except OSError as exc:
                    raise os_error(exc, path, self._description, "list") from None
                yield _os_meta(path, st)

    def _entry_key(self, rel: str, entry: os.DirEntry[str]) -> str | None:
        """``entry``'s name in a walk (``"name/"`` for a folder), or None to leave it out: a
        symbolic link that cannot be followed (it loops: ``a -> b -> a``, or ``x -> x``).

        Such a link made every listing of the folder fail with "cannot list '' ...: it loops
        through symbolic links", naming neither the link nor what to do. A link named like
        a database's object or folder (``wal/...``, ``manifest``) may stand where a real
        object was, and leaving it out could hide one from the engine (the latest WAL or
        manifest id): that is an error naming the link. Any other is not shaledb's, so the
        listing leaves it out, with one warning per link."""
        try:
            return entry.name + "/" if entry.is_dir() else entry.name
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
        path = rel + entry.name
        segments = path.split("/")
        if any(
            is_own(tail) or is_own(tail + "/")
            for tail in ("/".join(segments[i:]) for i in range(len(segments)))
        ):
            raise InvalidPathError(
                f"cannot list {self._description}: {path!r} is a symbolic link that loops "
                f"(through {os.readlink(entry.path)!r}) where a database object may be; remove "
                "it, or make it point at the object"
            )
        if len(self._outside) < 64 and path not in self._outside:
            self._outside.add(path)
            log.warning("listing %s leaves out %r: a symbolic link that loops", self._description, path)
        return None

    def _listable(self, path: str, via_link: bool, full: str | None) -> bool:
        """Whether a listing shows the object ``path`` (or descends into the folder, when
        ``full`` is None): a valid name and, through links, one that stays inside the root."""
        if path in self._checked:
            return True
        try:
            path.encode()
            if via_link:
                self._resolve(path)
            else:
                check_relative_path(path)
                if full is not None:
                    self._remember(path, full)  # as _resolve would (no link on the way)
        except (InvalidPathError, UnicodeEncodeError) as exc:
            where = path.rpartition("/")[0]
            if len(self._outside) < 64 and where not in self._outside:
                self._outside.add(where)
                log.warning("listing %s leaves out %r: %s", self._description, path, exc)
            return False
        return True

    def _loops(self, here: str, entry: os.DirEntry[str]) -> bool:
        """Whether the folder link ``entry`` in ``here`` leads back to ``here`` or above
        (obstore's listing failed there; a listing now leaves the link out)."""
        target, real_here = os.path.realpath(entry.path), os.path.realpath(here)
        if real_here == target or real_here.startswith(target.rstrip("/") + "/"):
            log.warning(
                "listing %s does not follow %s: it loops back to %s", self._description, entry.path, target
            )
            return True
        return False

    def _p(self, path: str) -> str:
        self._resolve(path)
        return path

    def abandoned_stages(self, older_than: float) -> builtins.list[ObjectMeta]:
        """Staging files a killed process left, not modified since ``older_than`` (epoch
        seconds): what the garbage collector deletes besides objects (``local_fs``)."""
        if self._lazy is None and not self._root_exists():
            return []
        return abandoned_stages(self._real_root, older_than)

    def remove_stages(self, names: builtins.list[str]) -> None:
        """Delete staging files :meth:`abandoned_stages` named."""
        remove_stages(self._real_root, names, self._description)

    def remove_empty_dirs(self) -> None:
        """Remove the database's folders that hold nothing (``local_fs.remove_empty_dirs``):
        for a destroy, once every object is deleted."""
        if self._lazy is None and not self._root_exists():
            return
        self._dirs.clear()  # resolved folders, maybe removed now (a later put makes them again)
        remove_empty_dirs(self._real_root)

    def _resolve(self, path: str, *, final: bool = True) -> str:
        """The absolute path of ``path``, checked to stay inside the real root.

        Existing directories are resolved once and remembered, so a new object
        costs at most one ``lstat`` of its own name rather than a ``realpath``
        walk of every component (the WAL writes one object per group commit).
        ``final=False`` skips that ``lstat`` too: for a create, whose ``link``
        never follows a link at the name (it fails, as for any existing name).
        """
        full = self._checked.get(path)
        if full is not None:
            return full
        check_relative_path(path)
        parent, _, name = path.rpartition("/")
        real_parent = self._dirs.get(parent)
        if real_parent is None:
            real_parent = os.path.realpath(os.path.join(self._real_root, parent))
            self._check_inside(path, real_parent)
            if os.path.isdir(real_parent) and len(self._dirs) < 4096:
                self._dirs[parent] = real_parent
        full = os.path.join(real_parent, name)
        if not final:
            return full
        if os.path.islink(full):
            self._check_inside(path, os.path.realpath(full))
        self._remember(path, full)
        return full

    def _remember(self, path: str, full: str) -> None:
        if path.startswith(self.IMMUTABLE_PREFIXES):
            if len(self._checked) > 65536:
                self._checked.clear()
            self._checked[path] = full

    def _check_inside(self, path: str, real: str) -> None:
        if os.path.commonpath([real, self._real_root]) != self._real_root:
            raise InvalidPathError(
                f"{path!r} resolves outside {self._description} (through a symlink); "
                "remove the link or use a directory without links that leave it"
            )

    def put(
        self,
        path: str,
        data: bytes | bytearray | memoryview,
        *,
        create: bool = False,
        attributes: Mapping[str, str] | None = None,
    ) -> None:
        """Puts are done here, the way object_store does them, with ``os`` calls.

        Stage ``<path>#<n>`` (listings skip such names), then for a create ``link`` it to
        ``path`` (fails if ``path`` exists: the create-if-absent check) and unlink the
        stage, else rename it over ``path`` (an atomic replace). The same syscalls as
        obstore's local store, without its runtime hand-off, which was two thirds of a
        1 KiB WAL object's write and hangs in a forked child (see :meth:`get`).
        """
        self._open_root(create=True)
        full = self._resolve(path, final=False)  # neither link nor rename follows a link at the name
        try:
            stage = self._stage(full, data, uncached=create)
        except OSError as exc:
            raise os_error(exc, path, self._description, "write") from exc
        if not create:
            try:
                os.replace(stage, full)
            except OSError as exc:
                _unlink_quietly(stage)
                raise os_error(exc, path, self._description, "write") from exc
            self._remember(path, full)
            return
        try:
            os.link(stage, full)
            self._remember(path, full)  # our own regular file now
        except FileExistsError:
            raise AlreadyExists(path) from None
        except OSError as exc:
            raise os_error(exc, path, self._description, "write") from exc
        finally:
            _unlink_quietly(stage)

    def _stage(self, full: str, data: bytes | bytearray | memoryview, *, uncached: bool) -> str:
        """A new stage of ``full`` holding ``data``; ``uncached``: out of the page cache if it is
        large (creates only: a bulk load's objects; overwrites are small and read again)."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
        n = 1
        while True:
            stage = f"{full}#{n}"
            try:
                fd = os.open(stage, flags, 0o666)
                break
            except FileExistsError:
                n += 1  # another writer's stage (object_store numbers them the same way)
            except FileNotFoundError:
                os.makedirs(os.path.dirname(full), exist_ok=True)
        try:
            view = memoryview(data).cast("B")
            if uncached and self.drop_cache_min_bytes and len(view) >= self.drop_cache_min_bytes:
                self._write_uncached(fd, view)
            else:
                _write_all(fd, view)
        except BaseException:
            os.close(fd)
            os.unlink(stage)
            raise
        os.close(fd)
        return stage

    def _write_uncached(self, fd: int, view: memoryview) -> None:
        """Write ``view`` a MiB at a time, asking the kernel after each MiB to
        write back and drop the file's pages (``POSIX_FADV_DONTNEED``; pages
        still being written back stay until a later call).

        For bulk loads (the ingest's SSTs): each new page-cache page is memory
        the kernel must find and zero, and on a virtual machine whose host has
        reclaimed free memory that costs about 2.5 ms per MB (docs/benchmarks.md,
        "page cost"). Dropped pages are reused by the next MiB, so the write
        costs a copy and not a fresh page per 4 KiB; and a load larger than
        memory does not push the working set out of the cache. RocksDB's
        ``SstFileWriter`` does the same (``invalidate_page_cache``). The price:
        the first read of the object goes to disk.
        """
        advise, step = _fadvise, self.DROP_CACHE_PIECE_BYTES
        at = 0
        while advise is not None and at < len(view):
            _write_all(fd, view[at : at + step])
            at += step
            try:
                advise(fd, 0, 0, _DONTNEED)
            except OSError:  # advice only: a file system that refuses it keeps the pages
                advise = None
        _write_all(fd, view[at:])

    def _acquire(self, path: str) -> _OpenFile:
        with self._files_lock:
            f = self._files.get(path)
            if f is not None:
                f.users += 1
                return f
        full = self._resolve(path)
        try:
            fd = os.open(full, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            raise os_error(exc, path, self._description, "open") from None
        with self._files_lock:
            other = self._files.get(path)
            if other is not None:  # another thread opened it meanwhile
                os.close(fd)
                other.users += 1
                return other
            f = self._files[path] = _OpenFile(fd)
            f.users = 1
            if len(self._files) > self.MAX_OPEN_FILES:
                for victim_path in list(self._files)[: len(self._files) // 4]:
                    if victim_path != path:
                        self._evict_locked(victim_path)
            return f

    def _release(self, f: _OpenFile) -> None:
        with self._files_lock:
            f.users -= 1
            if f.evicted and f.users == 0:
                os.close(f.fd)

    def _evict_locked(self, path: str) -> None:
        f = self._files.pop(path, None)
        if f is not None:
            f.evicted = True
            if f.users == 0:
                os.close(f.fd)

    def get(self, path: str) -> bytes:
        """The whole object, read with ``os`` calls as ranges of immutable ones are.

        obstore hands a local read to its runtime's blocking threads, which a forked
        child does not inherit: in a child forked within seconds of its parent's last
        read (multiprocessing's default on Linux), a reader opened there waited forever
        for the manifest. A directory or a missing name is an absent object, as before.
        """
        full = self._resolve(path)
        try:
            with open(full, "rb", buffering=0) as f:
                return f.readall()
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.EISDIR):
                raise ObjectNotFound(path) from None
            raise os_error(exc, path, self._description, "read") from None

    def head(self, path: str) -> ObjectMeta:
        """``os.stat`` of the object, for the reason :meth:`get` reads with ``os`` calls
        (metadata as obstore's: :func:`_os_meta`)."""
        full = self._resolve(path)
        try:
            st = os.stat(full)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                raise ObjectNotFound(path) from None
            raise os_error(exc, path, self._description, "stat") from None
        if stat.S_ISDIR(st.st_mode):
            raise ObjectNotFound(path)
        return _os_meta(path, st)

    def get_range(self, path: str, start: int, end: int) -> bytes:
        if end <= start or start < 0:
            return super().get_range(path, start, end)  # argument checks and empty ranges, no I/O
        return self.get_ranges(path, ((start, end),))[0]

    def get_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> builtins.list[bytes]:
        """One ``pread`` per range: on a cached descriptor for immutable objects (the
        store exchange reads a staged run's batches this way, and obstore's local ranges
        cost a runtime hand-off and a copy into ``bytes`` each), on one opened for the
        call otherwise (obstore's would hang in a forked child, see :meth:`get`)."""
        if not ranges or any(s < 0 or e < 0 for s, e in ranges):
            return super().get_ranges(path, ranges)  # argument checks live there, no I/O
        if path.startswith(self.IMMUTABLE_PREFIXES):
            return self._pread(path, ranges)
        full = self._resolve(path)
        try:
            fd = os.open(full, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            raise os_error(exc, path, self._description, "open") from None
        try:
            return [os.pread(fd, e - s, s) if e > s else b"" for s, e in ranges]
        except OSError as exc:
            if exc.errno == errno.EISDIR:
                raise ObjectNotFound(path) from None
            raise os_error(exc, path, self._description, "read") from None
        finally:
            os.close(fd)

    def _pread(self, path: str, ranges: Sequence[tuple[int, int]]) -> builtins.list[bytes]:
        f = self._acquire(path)
        try:
            return [os.pread(f.fd, e - s, s) if e > s else b"" for s, e in ranges]
        except OSError as exc:
            raise Unavailable(f"cannot read {path} in {self._description}: {exc}") from exc
        finally:
            self._release(f)

    def copy(self, src: str, dst: str, *, create: bool = False) -> None:
        """A hard link, as obstore's local copy: ``link`` straight to ``dst`` for a create
        (fails if it exists), else to a stage ``<dst>#<n>`` renamed over ``dst``."""
        self._open_root(create=True)
        source = self._resolve(src)
        target = self._resolve(dst, final=False)  # neither link nor rename follows a link at dst
        n = 0
        while True:
            name = target if create else f"{target}#{n}"
            try:
                os.link(source, name, **_LINK_ITSELF)
                break
            except FileExistsError:
                if create:
                    raise AlreadyExists(dst) from None
                n += 1  # another copy's stage
            except OSError as exc:
                if not os.path.exists(source) or os.path.isdir(source):
                    raise ObjectNotFound(src) from None
                if exc.errno != errno.ENOENT:
                    raise os_error(exc, src, self._description, "copy") from None
                try:
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                except OSError as mkdir_exc:
                    raise os_error(mkdir_exc, dst, self._description, "copy") from None
        if not create:
            try:
                os.replace(name, target)
            except OSError as exc:
                _unlink_quietly(name)
                raise os_error(exc, dst, self._description, "copy") from None

    def delete(self, path: str) -> None:
        self._unlink(path, self._resolve(path))

    def delete_many(self, paths: Sequence[str]) -> None:
        full = [self._resolve(p) for p in paths]  # every path checked before anything goes
        for path, name in zip(paths, full, strict=True):
            self._unlink(path, name)
        self._drop_stage_dirs(paths)

    def _unlink(self, path: str, full: str) -> None:
        """``unlink``; a missing object (or a directory at its name: not an object) is no error."""
        with self._files_lock:
            self._evict_locked(path)
        self._checked.pop(path, None)
        try:
            os.unlink(full)
        except (FileNotFoundError, IsADirectoryError):
            return
        except OSError as exc:
            raise os_error(exc, path, self._description, "delete") from None

    def _drop_stage_dirs(self, paths: Sequence[str]) -> None:
        """Remove the folders of staged runs (``tmp/stage/<exchange>/``) their deletes left
        empty. A directory is not an object, so nothing else removes them: a stream into a
        local directory left one empty folder per micro-batch. Best effort: a folder that
        is not empty, or gone already, stays as it is."""
        folders = {p.rsplit("/", 1)[0] for p in paths if p.startswith(STAGE_DIR) and p.count("/") >= 3}
        for folder in folders:
            try:
                os.rmdir(os.path.join(self._real_root, *folder.split("/")))
            except OSError:
                pass

    def close(self) -> None:
        with self._files_lock:
            for path in list(self._files):
                self._evict_locked(path)
        super().close()
