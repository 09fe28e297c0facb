"""The local directory store's edge with the operating system: root checks, directory
creation that leaves nothing behind, and OS errors mapped to the error tree.

An outside audit found ``OSError`` (errno 36) for a 300-character path component,
parent directories left behind when a very long path failed half-way, and
``NotADirectoryError`` for ``some_file/db``; and every call on a missing
database (``list_checkpoints``, ``destroy``, a clone whose parent URL was
wrong, the CLI's ``get``) created the database's empty root directory. So:

* :func:`real_root` resolves the root's links, a link it may not read being
  ``PermissionDenied`` naming the database's path;
* :func:`check_root` refuses, before anything is touched, a root whose
  components or total length the file system cannot hold, or that lies below
  something that is not a directory;
* the store creates its root only when it first writes (opening, reading and
  listing a missing database create nothing), with :func:`make_dirs`, which
  removes what it created when a later component fails;
* :func:`os_error` turns an ``OSError`` into the error a caller can act on:
  a bad path is ``InvalidPathError`` (not worth retrying), a permission the
  operating system refuses (``EACCES``, ``EPERM``: modes, ownership, an
  immutable file) ``PermissionDenied`` -- the same error as a cloud store's
  HTTP 401/403, so one ``except`` serves every store kind --, a read-only file
  system ``InvalidArgument``, a missing object ``ObjectNotFound``, and only what
  may pass (disk full, too many open files, I/O errors) ``Unavailable``;
* :func:`abandoned_stages` finds the staging files (``<name>#<n>``) a process
  killed between writing an object and linking it into place left behind
  (listings never show them, so nothing else would ever delete them), and
  :func:`remove_stages` deletes them -- for the garbage collector;
* :func:`remove_empty_dirs` removes the database's folders a destroy emptied;
* :func:`embedded_errno` finds the OS error code inside an error of obstore's
  local store, which reports it only in its message (``... (os error 13)``),
  so those errors get the same mapping instead of being retried as outages.
"""

from __future__ import annotations

import errno
import itertools
import os
import re
import stat

from ..errors import (
    InvalidArgument,
    InvalidPathError,
    ObjectNotFound,
    PermissionDenied,
    ShaleError,
    Unavailable,
)
from ..format.paths import OWN_DIRS
from .base import ObjectMeta

_BAD_PATH = {
    errno.ENAMETOOLONG: "a name in it is too long for the file system",
    errno.ENOTDIR: "a part of it is a file, not a directory",
    errno.EISDIR: "it names a directory, not a file",
    errno.ELOOP: "it loops through symbolic links",
    errno.EINVAL: "the file system refuses the name",
    errno.EEXIST: "something else already exists at that name",
}
_DENIED = {errno.EACCES, errno.EPERM}
_OS_ERROR_CODE = re.compile(r"\(os error (\d+)\)")


def os_error(exc: OSError, path: str, where: str, action: str = "access") -> ShaleError:
    """The error-tree form of ``exc`` raised while ``action``-ing ``path`` in the store ``where``."""
    code = exc.errno
    reason = exc.strerror or type(exc).__name__
    if code == errno.ENOENT:
        return ObjectNotFound(path)
    if code in _BAD_PATH:
        return InvalidPathError(f"cannot {action} {path!r} in {where}: {_BAD_PATH[code]} ({reason})")
    if code in _DENIED:
        return PermissionDenied(
            f"cannot {action} {path!r} in {where}: {reason} (errno {code}); check the permissions "
            "of the directory and its files for the user this process runs as (and immutable "
            "attributes, lsattr)"
        )
    if code == errno.EROFS:
        return InvalidArgument(f"cannot {action} {path!r} in {where}: {reason}; the file system is read-only")
    return Unavailable(f"cannot {action} {path!r} in {where}: {reason}")


def embedded_errno(exc: BaseException) -> int | None:
    """The OS error code an obstore local-store error names in its message, if it is
    one the mapping treats specially (a refused permission, a read-only file system)."""
    m = _OS_ERROR_CODE.search(str(exc))
    if m is None:
        return None
    code = int(m.group(1))
    return code if code in _DENIED or code == errno.EROFS else None


def _limits(existing: str) -> tuple[int, int]:
    """(longest name, longest path) the file system under ``existing`` accepts."""
    try:
        name_max = os.pathconf(existing, "PC_NAME_MAX")
        path_max = os.pathconf(existing, "PC_PATH_MAX")
    except (OSError, ValueError, AttributeError):  # no pathconf (Windows) or no answer
        name_max, path_max = 255, 4096
    return int(name_max or 255), int(path_max or 4096)


def real_root(directory: str) -> str:
    """``os.path.realpath(directory)``, a refused link mapped like every other OS error.

    ``realpath`` reads each symbolic link on the way, and one this user may not read (as
    ``/proc/1/root`` for anyone but its owner) raised a bare ``PermissionError`` -- a traceback
    from the Python API, ``PermissionError: [Errno 13] ...`` naming only the link from the
    command line -- before the store could say which database it was opening."""
    try:
        return os.path.realpath(directory)
    except OSError as exc:
        raise os_error(exc, directory, f"file://{directory}", "open the directory") from exc


def check_root(directory: str) -> None:
    """Refuse a root directory that could never be created or used, touching nothing.

    ``directory`` is absolute. Raises InvalidPathError naming the problem.
    """
    existing = directory
    while not os.path.lexists(existing):
        parent = os.path.dirname(existing)
        if parent == existing:
            break
        existing = parent
    if os.path.lexists(existing) and not os.path.isdir(existing):
        if existing == directory:
            raise InvalidPathError(f"{directory} exists and is not a directory; a database needs a directory")
        raise InvalidPathError(
            f"cannot place a database at {directory}: {existing} is a file, not a directory"
        )
    name_max, path_max = _limits(existing if os.path.isdir(existing) else "/")
    long = [p for p in directory.split(os.sep) if len(os.fsencode(p)) > name_max]
    if long:
        raise InvalidPathError(
            f"cannot place a database at {directory[:80]}...: the name {long[0][:40]!r}... is "
            f"{len(os.fsencode(long[0]))} bytes; the file system allows {name_max}"
        )
    # Leave room below the root for the store's own names (about 40 bytes: tmp/stage/<id>/...).
    if len(os.fsencode(directory)) + 64 > path_max:
        raise InvalidPathError(
            f"cannot place a database at {directory[:80]}...: the path is {len(os.fsencode(directory))} "
            f"bytes; the file system allows {path_max} including the database's own names"
        )


def make_dirs(directory: str, where: str) -> None:
    """Create ``directory`` and missing parents; if any step fails, remove the ones
    created here and raise the mapped error (nothing is left behind)."""
    missing: list[str] = []
    d = directory
    while not os.path.isdir(d):
        missing.append(d)
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    created: list[str] = []
    try:
        for d in reversed(missing):
            try:
                os.mkdir(d)
            except FileExistsError:
                if not os.path.isdir(d):
                    raise
                continue  # another process made it meanwhile: not ours to remove
            created.append(d)
    except OSError as exc:
        for d in reversed(created):
            try:
                os.rmdir(d)
            except OSError:
                break  # something appeared inside it: no longer only ours
        raise os_error(exc, directory, where, "create the directory") from None


STAGE_NAME = re.compile(r"#\d+$")
"""A staging file's name: the object's name and ``#<n>`` (obstore's local store and ours
both stage a put this way, then rename or link it into place)."""


def abandoned_stages(root: str, older_than: float) -> list[ObjectMeta]:
    """Staging files below ``root`` last modified before ``older_than`` (seconds since
    the epoch), as metas with paths relative to ``root``, sorted.

    A put writes the whole stage and then links it, within the put's own call, so a
    stage not modified for longer than any put takes was left by a process that
    died in between. A stage is not an object: listings skip ``#`` names. The walk
    does not follow symbolic links and leaves out a directory holding another
    database (a ``manifest`` directory below the root): its stages are its own. Only the
    database's folders are walked (``paths.OWN_DIRS``): a user's files elsewhere under the
    root are not its own, whatever their names.
    """
    found: list[ObjectMeta] = []
    walks = (os.walk(os.path.join(root, own.rstrip("/"))) for own in OWN_DIRS)
    for here, dirs, files in itertools.chain.from_iterable(walks):
        if "manifest" in dirs:
            dirs[:] = []
            continue
        for name in files:
            if STAGE_NAME.search(name) is None:
                continue
            full = os.path.join(here, name)
            try:
                st = os.lstat(full)
            except OSError:
                continue  # linked and removed meanwhile: a live put's
            if stat.S_ISREG(st.st_mode) and st.st_mtime < older_than:
                rel = os.path.relpath(full, root).replace(os.sep, "/")
                found.append(ObjectMeta(rel, st.st_size, st.st_mtime))
    return sorted(found, key=lambda m: m.path)


def remove_empty_dirs(root: str) -> None:
    """Remove the database's folders (``paths.OWN_DIRS``) below ``root`` that hold nothing,
    deepest first: what deleting every object of a destroyed database leaves (a directory is
    not an object, so no delete removes it; a destroyed database left ``manifest/``, ``wal/``,
    ``compacted/`` ... empty behind). Only empty folders go (``rmdir``), so one that still
    holds anything -- a user's file, another database -- stays with what it holds; nothing
    outside the database's folders is touched, not the root (it may have been there before
    the database), not above it; no symbolic link is followed. Best effort: a folder that
    cannot be removed stays."""
    for own in OWN_DIRS:
        top = os.path.join(root, own.rstrip("/"))
        if os.path.islink(top):
            continue  # not ours to walk: it leads elsewhere
        found: list[str] = []
        for here, dirs, _ in os.walk(top):  # os.walk does not follow links below ``top``
            if "manifest" in dirs:
                dirs[:] = []  # another database's root: its folders are its own
            found.append(here)
        for d in reversed(found):
            try:
                os.rmdir(d)
            except OSError:
                pass  # not empty (or gone, or refused): stays as it is


def remove_stages(root: str, names: list[str], where: str) -> None:
    """Delete the staging files ``names`` (relative to ``root``, from
    :func:`abandoned_stages`); one already gone is not an error."""
    for name in names:
        if STAGE_NAME.search(name) is None or name.startswith("/") or ".." in name.split("/"):
            raise InvalidArgument(f"{name!r} is not a staging file's name below {where}")
        try:
            os.unlink(os.path.join(root, name))
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise os_error(exc, name, where, "delete") from exc


__all__ = [
    "STAGE_NAME",
    "abandoned_stages",
    "check_root",
    "embedded_errno",
    "make_dirs",
    "os_error",
    "remove_empty_dirs",
    "real_root",
    "remove_stages",
]
