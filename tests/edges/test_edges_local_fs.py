"""Audit findings 5 and 6 on a local directory: OS errors become the error tree at the
store boundary (a name too long, a file where a directory should be, a refused
permission), a failure leaves no directories behind, and no call on a missing
database creates anything unless it creates the database."""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from shaledb import Db, DbReader, InvalidArgument, NotFound, Settings, admin
from shaledb.cli import main
from shaledb.cli.output import EXIT_NOT_FOUND
from shaledb.errors import InvalidPathError, ObjectNotFound, PermissionDenied, Unavailable
from shaledb.store import open_store
from shaledb.store.local_fs import embedded_errno, make_dirs, os_error

QUIET = Settings(compactor=None, garbage_collector=None)


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_name_too_long_is_invalid_path_and_creates_nothing(tmp_path: Path) -> None:
    url = str(tmp_path / "parent" / ("x" * 300) / "db")
    with pytest.raises(InvalidPathError, match=r"too long|allows"):
        Db.open(url, settings=QUIET)
    assert _tree(tmp_path) == []


def test_very_long_path_is_invalid_path_and_creates_nothing(tmp_path: Path) -> None:
    url = os.path.join(str(tmp_path), *(["d" * 200] * 30), "db")
    with pytest.raises(InvalidPathError):
        Db.open(url, settings=QUIET)
    assert _tree(tmp_path) == []


@pytest.mark.parametrize("below", ["db", "a/b/db"])
def test_a_file_in_the_path_is_invalid_path(tmp_path: Path, below: str) -> None:
    (tmp_path / "some_file").write_bytes(b"x")
    with pytest.raises(InvalidPathError, match="not a directory"):
        Db.open(str(tmp_path / "some_file" / below), settings=QUIET)
    assert _tree(tmp_path) == ["some_file"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_permission_refused_is_permission_denied(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        with pytest.raises(PermissionDenied, match="permissions"):
            Db.open(str(locked / "db"), settings=QUIET)
    finally:
        locked.chmod(0o700)


def test_os_errors_map_to_the_error_tree() -> None:
    """EACCES and EPERM are PermissionDenied (as a cloud store's 401/403), not InvalidArgument;
    obstore's local errors carry the code only in their text, which is read too."""
    for code in (errno.EACCES, errno.EPERM):
        exc = OSError(code, os.strerror(code), "/x/y")
        assert isinstance(exc, PermissionError)  # what the OS raises
        err = os_error(exc, "wal/1.sst", "file:///x", "write")
        assert type(err) is PermissionDenied and f"errno {code}" in str(err), err
    assert type(os_error(OSError(errno.EROFS, "ro"), "p", "w")) is InvalidArgument
    assert type(os_error(OSError(errno.ENOENT, "gone"), "p", "w")) is ObjectNotFound
    assert type(os_error(OSError(errno.ENOSPC, "full"), "p", "w")) is Unavailable
    text = "Generic LocalFileSystem error: Unable to open file /x/a#1: Permission denied (os error 13)"
    assert embedded_errno(Exception(text)) == errno.EACCES
    assert embedded_errno(Exception(text.replace("13", "1"))) == errno.EPERM
    assert embedded_errno(Exception(text.replace("13", "28"))) is None  # ENOSPC: the usual mapping
    assert embedded_errno(Exception("no code here")) is None


@pytest.fixture
def immutable(tmp_path: Path) -> Iterator[Callable[[Path], None]]:
    """Sets the immutable attribute (chattr +i) on directories, which refuses changes
    inside them with EPERM even to root; cleared afterwards. Skips where chattr cannot."""
    done: list[Path] = []
    probe = tmp_path / "probe"
    probe.mkdir()
    if (
        shutil.which("chattr") is None
        or subprocess.run(["chattr", "+i", str(probe)], check=False, capture_output=True).returncode
    ):
        pytest.skip("chattr +i is not available here (needs CAP_LINUX_IMMUTABLE and ext4/xfs/btrfs)")
    done.append(probe)

    def make(p: Path) -> None:
        subprocess.run(["chattr", "+i", str(p)], check=True)
        done.append(p)

    try:
        yield make
    finally:
        for p in done:
            subprocess.run(["chattr", "-i", str(p)], check=False)


def test_an_immutable_directory_gives_permission_denied_even_to_root(
    tmp_path: Path, immutable: Callable[[Path], None]
) -> None:
    """A real EPERM from the OS (root is not exempt from the immutable attribute): every
    store call that changes the directory, through obstore's local store or shaledb's own
    create-if-absent, and the writer's open, raise PermissionDenied at once (not retried
    as Unavailable, not InvalidArgument)."""
    url = str(tmp_path / "db")
    with Db.open(url, settings=QUIET) as db:
        db.put(b"k", b"v", durable=True)
    st = open_store(url)
    st.put("tmp/x", b"1")
    immutable(tmp_path / "db" / "tmp")
    for what, call in (
        ("put", lambda: st.put("tmp/y", b"1")),
        ("overwrite", lambda: st.put("tmp/x", b"2")),
        ("create", lambda: st.put("tmp/z", b"1", create=True)),
        ("delete", lambda: st.delete("tmp/x")),
    ):
        with pytest.raises(PermissionDenied, match="Operation not permitted"):
            call()
        assert what
    immutable(tmp_path / "db" / "manifest")
    started = time.monotonic()
    with pytest.raises(PermissionDenied, match=r"manifest.*errno 1"):
        Db.open(url, settings=QUIET)
    assert time.monotonic() - started < 5  # a set-up mistake: no retries until the timeout


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root and setpriv to drop to another user",
)
def test_a_directory_another_user_may_not_enter_gives_permission_denied(tmp_path: Path) -> None:
    """A real EACCES as root's tests can get it: a child process running as ``nobody``
    opens a database in a directory only root may enter. (It said ``NotFound``: the
    local store asked ``os.path.isdir``, which answers False for a root it may not reach.)"""
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c"]
    probe = subprocess.run([*as_nobody, "import shaledb"], check=False, capture_output=True, timeout=120)
    if probe.returncode != 0:  # e.g. a checkout under a `mktemp -d` directory (mode 0700)
        pytest.skip("user nobody cannot import shaledb here (a directory on the checkout's path is private)")
    locked = tmp_path / "locked"
    with Db.open(str(locked / "db"), settings=QUIET) as db:
        db.put(b"k", b"v", durable=True)
    locked.chmod(0o700)
    tmp_path.chmod(0o755)
    code = (
        "import shaledb, sys\n"
        "try:\n"
        f"    shaledb.DbReader.open({str(locked / 'db')!r})\n"
        "except shaledb.errors.PermissionDenied as exc:\n"
        "    print('PermissionDenied', exc); sys.exit(0)\n"
        "sys.exit(3)\n"
    )
    res = subprocess.run(
        [*as_nobody, code],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Permission denied (errno 13)" in res.stdout


def _unreadable_link() -> str:
    """``/proc/1/root``: a link only PID 1's owner may read (EACCES for other users, and for
    root in a container without ``CAP_SYS_PTRACE``)."""
    try:
        os.readlink("/proc/1/root")
    except PermissionError:
        return "/proc/1/root"
    except OSError:
        pass
    pytest.skip("this process may read /proc/1/root (root outside a container): no refused link here")


def test_a_link_on_the_path_this_user_may_not_read_gives_permission_denied() -> None:
    """``realpath`` of the root raised a bare ``PermissionError`` (a traceback from the API;
    ``PermissionError: [Errno 13] ... '/proc/1/root'`` from the command line): it is
    ``PermissionDenied`` naming the database's path, for the writer, readers and admin calls."""
    url = _unreadable_link() + "/x/db"
    for what, call in (
        ("Db.open", lambda: Db.open(url, settings=QUIET)),
        ("Db.open file://", lambda: Db.open("file://" + url, settings=QUIET)),
        ("DbReader.open", lambda: DbReader.open(url)),
        ("open_store", lambda: open_store(url)),
        ("destroy", lambda: admin.destroy(url, soft=False)),
        ("list_checkpoints", lambda: admin.list_checkpoints(url)),
    ):
        with pytest.raises(PermissionDenied, match=f"cannot open the directory '{url}'.*Permission denied"):
            call()
        assert what


@pytest.mark.parametrize("command", [["scan"], ["get", "k"], ["put", "k", "v"], ["destroy", "--hard"]])
def test_the_cli_says_permission_denied_in_one_line_for_a_path_it_may_not_read(command: list[str]) -> None:
    url = _unreadable_link() + "/x/db"
    res = subprocess.run(
        [sys.executable, "-m", "shaledb", "--path", url, *command],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 1, res.stderr
    assert res.stderr.startswith(f"shaledb: error: PermissionDenied: cannot open the directory '{url}'")
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr


def _without_root_s_override() -> list[str]:
    """A prefix that runs a command without the power to ignore file modes: nothing for a
    non-root user; for root, a user namespace (``unshare --user``: same owner, no
    ``CAP_DAC_OVERRIDE`` over the host's files, so a mode-000 directory refuses it too)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("unshare") is None:
        pytest.skip("root without unshare: mode bits do not apply")
    probe = subprocess.run(["unshare", "--user", "true"], capture_output=True, timeout=30, check=False)
    if probe.returncode != 0:
        pytest.skip("user namespaces are not allowed here: mode bits do not apply to root")
    return ["unshare", "--user"]


@pytest.mark.parametrize("command", [["scan"], ["get", "k"], ["put", "k", "v"], ["destroy", "--hard"]])
def test_the_cli_says_permission_denied_in_one_line_for_a_locked_directory(
    tmp_path: Path, command: list[str]
) -> None:
    """A database under a mode-000 directory: every command a user runs ends in one line
    naming the path, exit 1, and changes nothing."""
    prefix = _without_root_s_override()
    locked = tmp_path / "locked"
    with Db.open(str(locked / "db"), settings=QUIET) as db:
        db.put(b"k", b"v", durable=True)
    before = _tree(locked)
    locked.chmod(0)
    try:
        res = subprocess.run(
            [*prefix, sys.executable, "-m", "shaledb", "--path", str(locked / "db"), *command],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        locked.chmod(0o700)
    assert res.returncode == 1, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shaledb: error: PermissionDenied: cannot "), res.stderr
    assert str(locked / "db") in lines[0] and "Permission denied (errno 13)" in lines[0]
    assert _tree(locked) == before


def test_make_dirs_removes_what_it_created_when_a_later_step_fails(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / ("c" * 300) / "d"
    with pytest.raises(InvalidPathError):
        make_dirs(str(target), "test")
    assert _tree(tmp_path) == []


def test_make_dirs_keeps_directories_it_did_not_create(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    with pytest.raises(InvalidPathError):
        make_dirs(str(tmp_path / "a" / "b" / ("c" * 300)), "test")
    assert _tree(tmp_path) == ["a"]


def test_opening_reading_and_listing_a_missing_root_create_nothing(tmp_path: Path) -> None:
    st = open_store(str(tmp_path / "db"))
    assert list(st.list("")) == []
    assert list(st.list("manifest/")) == []
    with pytest.raises(ObjectNotFound):
        st.get("manifest/00000000000000000001.manifest")
    with pytest.raises(ObjectNotFound):
        st.head("x")
    assert st.get_range("wal/1", 0, 0) == b""
    with pytest.raises(ObjectNotFound):
        st.get_range("wal/00000000000000000001.wal", 0, 10)
    st.delete("x")
    st.delete_many(["x", "y"])
    assert not (tmp_path / "db").exists()
    st.put("a/b", b"1", create=True)
    assert (tmp_path / "db" / "a" / "b").read_bytes() == b"1"


def test_missing_database_calls_create_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = str(tmp_path / "nothing")
    with pytest.raises(NotFound):
        admin.list_checkpoints(url)
    with pytest.raises(NotFound):
        admin.destroy(url)
    with pytest.raises(NotFound):
        admin.read_manifest(url)
    with pytest.raises(NotFound):
        DbReader.open(url)
    with pytest.raises(NotFound):
        Db.open(url, settings=QUIET, create_if_missing=False)
    assert main(["--path", url, "get", "k"]) == EXIT_NOT_FOUND
    assert main(["--path", url, "list-checkpoints"]) == EXIT_NOT_FOUND
    capsys.readouterr()
    assert _tree(tmp_path) == []


@pytest.mark.parametrize("parent", ["s3://", "memory://", "ftp://x/y", "{clone}/../missing-parent"])
def test_clone_with_bad_or_missing_parent_creates_nothing(tmp_path: Path, parent: str) -> None:
    clone = str(tmp_path / "clone")
    parent = parent.format(clone=clone) if "{clone}" in parent else parent
    with pytest.raises((InvalidArgument, NotFound)):
        Db.open_from_checkpoint(clone, parent, settings=QUIET)
    assert _tree(tmp_path) == []


def _open_with_cache(directory: Path | str) -> None:
    settings = Settings(compactor=None, garbage_collector=None, disk_cache_dir=str(directory))
    with Db.open("memory://cache-dir", settings=settings) as db:
        db.put(b"k", b"v")
        db.flush(memtable=True)
        assert db.get(b"k") == b"v"


def test_a_disk_cache_dir_refused_by_the_os_is_permission_denied_naming_it(
    tmp_path: Path, immutable: Callable[[Path], None]
) -> None:
    """A cache directory this process may not write (or create) raised a bare
    ``sqlite3.OperationalError: unable to open database file`` (an existing directory: the
    cache's index could not be made) or InvalidArgument (a new one): a set-up problem, as a
    database's directory gives, so PermissionDenied naming the directory."""
    locked = tmp_path / "locked"
    locked.mkdir()
    immutable(locked)
    for directory in (locked, locked / "new"):
        with pytest.raises(PermissionDenied, match=re.escape(f"disk_cache_dir '{directory}' cannot be used")):
            _open_with_cache(directory)
    assert not (locked / "new").exists()


def test_a_disk_cache_dir_under_a_file_is_invalid_naming_it(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_bytes(b"x")
    for directory in (f, f / "cache"):
        with pytest.raises(
            InvalidArgument, match=re.escape(f"disk_cache_dir '{directory}' cannot be used")
        ) as info:
            _open_with_cache(directory)
        assert not isinstance(info.value, PermissionDenied)


def test_a_disk_cache_dir_whose_link_cannot_be_read_is_permission_denied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``realpath`` reads each symbolic link on the way; one this user may not read (as
    ``/proc/1/root`` for anyone but its owner, so not testable as root) raised a bare
    ``PermissionError``. Its refusal is injected here."""

    def refuse(path: str, *args: object, **kwargs: object) -> str:
        raise PermissionError(errno.EACCES, "Permission denied", path)

    directory = tmp_path / "link" / "cache"
    monkeypatch.setattr(os.path, "realpath", refuse)
    with pytest.raises(
        PermissionDenied, match=re.escape(f"disk_cache_dir '{directory}' cannot be used: Permission denied")
    ):
        _open_with_cache(directory)


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write any directory: the immutable test covers it")
def test_a_disk_cache_dir_without_write_permission_is_permission_denied(tmp_path: Path) -> None:
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o500)
    try:
        for directory in (parent, parent / "new"):
            with pytest.raises(PermissionDenied, match=re.escape(f"disk_cache_dir '{directory}'")):
                _open_with_cache(directory)
    finally:
        parent.chmod(0o700)
