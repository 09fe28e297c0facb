"""The one error tree of shaledb.

Every error the package raises derives from :class:`ShaleError`, so callers can
catch the whole family, and the top-level classes tell the caller what to do:

* :class:`FencedError` -- another writer or compactor took over; reopen.
* :class:`ClosedError` -- the handle was closed (or failed); reopen.
* :class:`CorruptionError` -- stored bytes are damaged; names the object.
* :class:`InvalidArgument` -- fix the call or the settings (also a ``ValueError``).
* :class:`NotFound` -- a database, checkpoint or object does not exist.
* :class:`Unavailable` -- the store could not be reached after retries; retry.
* :class:`PermissionDenied` -- the store refused the credentials; fix the set-up.
* :class:`ConflictError` -- an optimistic update lost a race; retry it.

Store-level conditions (an object exists, a precondition failed) are subclasses
so the engine can tell them apart while users still see one family.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager


class ShaleError(Exception):
    """Base class of every error raised by shaledb.

    Every error pickles and copies as itself, with its attributes (``path``, ``key``,
    ``oldest_seq``, ``option``...): ``multiprocessing`` and ``concurrent.futures`` send a
    worker's exception to the parent by pickle, and the default way re-runs ``__init__``
    with the formatted message, which fails for a class whose ``__init__`` takes other
    arguments (a pool then hangs: its result thread dies on the ``TypeError``) and
    formats twice for one that prefixes its message.
    """

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuilt, (type(self), self.args), self.__dict__ or None)


def _rebuilt(cls: type[ShaleError], args: tuple[object, ...]) -> ShaleError:
    """``cls`` with ``args`` as its message, without running its ``__init__`` again (the
    attributes it set come back from the pickled ``__dict__``)."""
    return cls.__new__(cls, *args)


class FencedError(ShaleError):
    """A newer writer (or compactor) claimed the database; this handle must stop.

    Raised by the next write, flush or manifest update of a fenced process; a fenced
    writer's reads then raise :class:`ClosedError` (its memory may hold writes that never
    landed, and misses the newer writer's). Nothing acknowledged before the fence is lost;
    reopen to continue.
    """


class ClosedError(ShaleError):
    """The handle was closed, or stopped after a background failure (a writer's reads and
    writes both stop then).

    ``__cause__`` holds the failure when the handle stopped on its own.
    """


class ReadOnlyError(ShaleError, OSError):
    """A write through a handle opened read-only (``shaledb.dbm.open(url, "r")``): open it
    with flag ``"w"`` or ``"c"`` to write. Also an ``OSError``, as ``dbm.dumb`` raises, so
    both ``shaledb.dbm.error`` and the standard library's ``dbm.error`` catch it."""


class WrongThread(ShaleError, RuntimeError):
    """An object that belongs to one thread (a :class:`~shaledb.Transaction`) was used from
    another: its buffered reads and writes are not guarded by a lock. Give each thread its
    own transaction (``db.transaction()`` is cheap)."""


class ForkedHandle(ClosedError):
    """Used in a process forked after the handle was made: a writer opened in the parent
    (its background threads did not survive the fork), or a cloud store client once the
    parent had used one (obstore's I/O runtime did not either: its requests would hang).
    Open handles in the child, or start children with ``multiprocessing``'s ``spawn``."""


class CorruptionError(ShaleError):
    """Stored bytes failed validation (checksum, length, structure or version).

    ``path`` names the damaged object so an operator can find it.
    """

    def __init__(self, message: str, path: str | None = None) -> None:
        self.path = path
        self.reason = message
        """The message without the path (for a report that names the path itself)."""
        super().__init__(f"{path}: {message}" if path else message)

    def with_path(self, path: str) -> CorruptionError:
        """Return a copy that names ``path`` (codecs do not know object names)."""
        if self.path:
            return self
        err = CorruptionError(str(self), path)
        err.__cause__ = self.__cause__
        return err


class InvalidArgument(ShaleError, ValueError):
    """A bad key, value, option, URL or path; the message says what to change.

    ``option`` is set when the message begins with the name of the option refused (the
    range checks of ``shaledb.numbers``): a caller that knows how the user spelled that
    option -- a command-line flag, an environment variable, a TOML key -- re-raises
    :meth:`naming` it, so the message names what the user wrote, not a field of a
    settings class the user never typed (``GcOptions.interval_s``).
    """

    option: str | None = None

    @classmethod
    def of_option(cls, option: str, message: str) -> InvalidArgument:
        """The error ``message`` (which begins with ``option``) about ``option``."""
        err = cls(message)
        err.option = option
        return err

    def naming(self, spelled: str, given: str | None = None) -> InvalidArgument:
        """This error with ``spelled`` in place of the option's name (itself if it names none);
        ``given``, the text the user typed, is quoted too when it is not a plain number
        (``got -300.0 (given as '-5m')``): the message says the converted seconds."""
        text = str(self)
        if self.option is None or not text.startswith(self.option):
            return self
        message = spelled + text[len(self.option) :]
        if given is not None:
            try:
                float(given)
            except ValueError:
                message += f" (given as {given!r})"
        return type(self).of_option(spelled, message)


@contextmanager
def named_as_typed(spellings: Mapping[str, tuple[str, str | None]]) -> Iterator[None]:
    """Range errors raised inside about a field in ``spellings`` name what the user typed.

    A class's check names its field (``GcOptions.interval_s``); the user typed a flag
    (``--interval 0``), an environment variable or a TOML key. ``spellings`` maps a field
    name to (that spelling, the text typed or ``None``), see :meth:`InvalidArgument.naming`;
    give only the fields the user gave. Other errors pass through unchanged. One helper
    for the CLI, the settings loader and ``Settings.from_dict``, so they name alike.
    """
    try:
        yield
    except InvalidArgument as exc:
        field = (exc.option or "").rpartition(".")[2]  # "GcOptions.interval_s" or "interval_s"
        if field not in spellings:
            raise
        raise exc.naming(*spellings[field]) from None


class InvalidPathError(InvalidArgument):
    """A path or URL that is malformed or would escape the database root."""


class NotFound(ShaleError, LookupError):
    """A database, checkpoint or object does not exist."""


class CursorExpired(NotFound):
    """A change-feed cursor needs WAL objects the garbage collector removed (``shaledb.engine.changes``)."""


class CursorAhead(InvalidArgument):
    """A change-feed cursor points past the end of the database's WAL: it came from another
    database, or was made up (``shaledb.engine.changes``)."""


class ObjectNotFound(NotFound):
    """The object store has no object at ``path``."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(f"object not found: {path}")


class CheckpointNotFound(NotFound):
    """No live checkpoint with that id: it never existed, was deleted, or expired."""


class DatabaseDestroyed(NotFound):
    """The database was destroyed (``shaledb.admin.destroy``); it cannot be opened."""


class BucketNotFound(NotFound):
    """The bucket or container a store URL names does not exist (a set-up mistake,
    not an outage: nothing is retried). The message names the bucket and endpoint."""


class PermissionDenied(ShaleError):
    """The store refused the credentials (HTTP 401/403), or none were found; or the
    operating system refused access to a local directory (EACCES, EPERM).

    A set-up mistake, not an outage: nothing is retried. The message names the
    store and what to set (``AWS_*``, ``GOOGLE_*`` or ``AZURE_*`` variables, or
    store options)."""


class InvalidDbState(ShaleError):
    """The database is in a state that forbids the operation: a clone whose
    initialization did not finish, or a hard destroy while checkpoints are live.
    The message says what to do."""


class Unavailable(ShaleError):
    """The object store could not be reached, even after retries. Safe to retry."""


class EndpointUnreachable(Unavailable):
    """The store's endpoint has never answered: its host does not resolve or it
    refuses connections. Raised at once, without retries, because before a first
    answer this is most often a wrong endpoint setting; once the store has
    answered, the same failures are transient and retried as :class:`Unavailable`."""


class ConflictError(ShaleError):
    """An optimistic update lost a race (a CAS conflict); re-read and retry."""


class TransactionConflict(ConflictError):
    """A transaction's commit lost to a write committed after it began; nothing was
    written. ``key`` is one conflicting key. Run the transaction again."""

    AGAIN = "; this transaction wrote nothing: run it again (a new db.transaction())"
    """Appended to every message: the what-to-do (the messages only said what conflicted)."""

    def __init__(self, key: bytes, message: str) -> None:
        self.key = key
        super().__init__(message + self.AGAIN)


class HistoryUnavailable(NotFound):
    """A time-travel read before the oldest point the history window keeps.

    ``oldest_seq`` is the oldest readable sequence number (the message also gives its time).
    """

    def __init__(self, message: str, oldest_seq: int) -> None:
        self.oldest_seq = oldest_seq
        super().__init__(message)


class PreconditionFailed(ConflictError):
    """A conditional store operation found the object in another state."""

    def __init__(self, path: str, message: str = "precondition failed") -> None:
        self.path = path
        super().__init__(f"{message}: {path}")


class AlreadyExists(PreconditionFailed):
    """A create-if-absent put found an object already at ``path``."""

    def __init__(self, path: str) -> None:
        super().__init__(path, "object already exists")


class NotSupported(ShaleError):
    """The store cannot do this operation (e.g. conditional writes)."""


class SetupError(ShaleError):
    """The environment around shaledb is not set up for the operation, e.g. Spark's
    Python workers run an interpreter that cannot import shaledb. Nothing was
    changed; the message names the setting to fix."""


class ExtraMissing(SetupError, ImportError):
    """A package of an optional extra is not installed (``pip install 'shaledb[spark]'``).

    Also an ``ImportError``: ``import shaledb.spark.stream`` or ``from shaledb.spark import
    stream`` without the extra raises it, and ``except ImportError`` around an optional
    import catches it as it would the bare ``ModuleNotFoundError`` it replaces."""


class ExtraMissingAttribute(SetupError, AttributeError):
    """:class:`ExtraMissing`, met by attribute access (``shaledb.spark.stream``): also an
    ``AttributeError``, so ``hasattr`` says False and ``getattr(module, name, default)``
    gives the default instead of raising. (One class cannot be both an ``ImportError``
    and an ``AttributeError``: Python refuses the base classes' layouts together.)"""


class MergeError(ShaleError):
    """A merge could not be folded (``shaledb.merge``): no operator, another operator,
    or the operator failed. Nothing stored was changed."""


class MergeOperatorMissing(MergeError):
    """The key holds merge operands not yet folded and this handle has no merge operator:
    open it with ``merge_operator=`` (the message names the one the database uses)."""


class MergeOperatorMismatch(MergeError):
    """The database records another merge operator than the one given: folding its
    operands with this one would give wrong values."""


class MergeOperatorFailed(MergeError):
    """The merge operator raised, or returned something that is not bytes (the
    original exception is the ``__cause__``)."""


__all__ = [
    "AlreadyExists",
    "BucketNotFound",
    "CheckpointNotFound",
    "ClosedError",
    "ConflictError",
    "CorruptionError",
    "DatabaseDestroyed",
    "EndpointUnreachable",
    "ExtraMissing",
    "ExtraMissingAttribute",
    "FencedError",
    "InvalidArgument",
    "MergeError",
    "MergeOperatorFailed",
    "MergeOperatorMismatch",
    "MergeOperatorMissing",
    "InvalidDbState",
    "InvalidPathError",
    "NotFound",
    "NotSupported",
    "SetupError",
    "ObjectNotFound",
    "PermissionDenied",
    "PreconditionFailed",
    "ReadOnlyError",
    "ShaleError",
    "Unavailable",
    "WrongThread",
]
