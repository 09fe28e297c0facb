"""The local directory store's edge with the operating system: root checks, directory
creation that leaves nothing behind, and OS errors mapped to the error tree.

An outside audit found ``OSError`` (errno 36) for a 300-character path component,
parent directories left behind when a very long path failed half-way, and
``NotADirectoryError`` for ``some_file/db``; and every call on a missing
database (``list_checkpoints``, ``destroy``, a clone whose parent URL was
wrong, the CLI's ``get``) created the database's empty root directory. So:

* :func:`check_root` refuses, before anything is touched, a root whose
  components or total length the file system cannot hold, or that lies below
  something that is not a directory;
* the store creates its root only when it first writes (opening, reading and
  listing a missing database create nothing), with :func:`make_dirs`, which
  removes what it created when a later component fails;
* :func:`os_error` turns an ``OSError`` into the error a caller can act on:
  a bad path is ``InvalidPathError`` (not worth retrying), a refused
  permission ``InvalidArgument``, a missing object ``ObjectNotFound``, and only
  what may pass (disk full, too many open files, I/O errors) ``Unavailable``.
"""

from __future__ import annotations

import errno
import os

from ..errors import InvalidArgument, InvalidPathError, ObjectNotFound, ShaleError, Unavailable

_BAD_PATH = {
    errno.ENAMETOOLONG: "a name in it is too long for the file system",
    errno.ENOTDIR: "a part of it is a file, not a directory",
    errno.EISDIR: "it names a directory, not a file",
    errno.ELOOP: "it loops through symbolic links",
    errno.EINVAL: "the file system refuses the name",
    errno.EEXIST: "something else already exists at that name",
}
_REFUSED = {errno.EACCES, errno.EPERM, errno.EROFS}


def os_error(exc: OSError, path: str, where: str, action: str = "access") -> ShaleError:
    """The error-tree form of ``exc`` raised while ``action``-ing ``path`` in the store ``where``."""
    code = exc.errno
    reason = exc.strerror or type(exc).__name__
    if code == errno.ENOENT:
        return ObjectNotFound(path)
    if code in _BAD_PATH:
        return InvalidPathError(f"cannot {action} {path!r} in {where}: {_BAD_PATH[code]} ({reason})")
    if code in _REFUSED:
        return InvalidArgument(
            f"cannot {action} {path!r} in {where}: {reason}; check the directory's permissions "
            "(and that its file system is writable)"
        )
    return Unavailable(f"cannot {action} {path!r} in {where}: {reason}")


def _limits(existing: str) -> tuple[int, int]:
    """(longest name, longest path) the file system under ``existing`` accepts."""
    try:
        name_max = os.pathconf(existing, "PC_NAME_MAX")
        path_max = os.pathconf(existing, "PC_PATH_MAX")
    except (OSError, ValueError, AttributeError):  # no pathconf (Windows) or no answer
        name_max, path_max = 255, 4096
    return int(name_max or 255), int(path_max or 4096)


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


__all__ = ["check_root", "make_dirs", "os_error"]
