"""The one scrubbing function: no secret leaves shaledb in text it produces.

An outside audit found the secret of ``s3://AKID:SECRET@bucket/db`` in
``str(exc)``, in chained errors and in the CLI's ``--debug`` output. URLs with
user-info are now refused (:mod:`.url`), but secrets reach text in other ways
too: a signed URL's query string, an ``Authorization`` header in a client's
debug dump, a key passed as a store option and echoed by the client library.
So every store description, every error a store raises (and the errors it
chains), and every log line the CLI writes goes through :func:`scrub`, which
replaces with ``<redacted>``:

* the user-info of any URL (``scheme://user:password@host`` -> ``scheme://<redacted>@host``);
* query parameters whose names look secret (``X-Amz-Signature``,
  ``X-Amz-Credential``, ``X-Amz-Security-Token``, ``sig``, ``token``, ``key``, ...);
* ``name: value`` / ``name=value`` pairs whose names look secret
  (``secret_access_key``, ``session_token``, ``password``, ``Authorization``, ...)
  and ``Bearer``/``Basic`` credentials;
* AWS access key ids (``AKIA...``, ``ASIA...``);
* the values of the credential environment variables, and every secret handed
  to :func:`register_secret` (``open_store`` registers the secret options it is given).

:func:`scrub_exception` scrubs an exception and its whole ``__cause__`` /
``__context__`` chain in place, so chaining an error for the traceback's sake
never carries a secret along; :class:`ScrubFilter` is a ``logging.Filter``
that scrubs a record's message and traceback (the CLI installs it; an
application can add it to its own handlers).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterable

REDACTED = "<redacted>"

SECRET_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "GOOGLE_SERVICE_ACCOUNT_KEY",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_ACCESS_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_CLIENT_SECRET",
)
"""Environment variables whose values are secrets wherever they appear."""

_SECRET_WORDS = r"(?:secret|token|password|passwd|credential|signature|sig|sas|key|auth\w*)"
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#@\s]+@")
_QUERY = re.compile(r"(?i)([?&;][\w.-]*" + _SECRET_WORDS + r"[\w.-]*=)[^&#\s\"'<>]*")
_PAIR = re.compile(
    r"(?i)\b([\w-]*(?:secret|token|password|passwd|credential|signature|"
    r"private_key|access_key|account_key|api_key|sas_key)[\w-]*[\"']?\s*[:=]\s*[\"']?)"
    r"(?!<redacted>)[^\s\"',;}&]+"
)
_AUTH = re.compile(r"(?i)\b((?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?)[^\"'\r\n]+")
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}")
_AWS_KEY_ID = re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b")

_registered: set[str] = set()
_lock = threading.Lock()
_MIN_SECRET = 4  # shorter strings would redact ordinary words


def register_secret(*values: str | None) -> None:
    """Remember ``values`` (keys, tokens) so :func:`scrub` removes them from any text."""
    with _lock:
        _registered.update(v for v in values if isinstance(v, str) and len(v) >= _MIN_SECRET)


def _known_secrets(extra: Iterable[str]) -> list[str]:
    with _lock:
        found = set(_registered)
    found.update(v for v in extra if isinstance(v, str) and len(v) >= _MIN_SECRET)
    found.update(v for n in SECRET_ENV if len(v := os.environ.get(n, "")) >= _MIN_SECRET)
    return sorted(found, key=len, reverse=True)  # longest first: a secret may contain another


def scrub(text: str, extra: Iterable[str] = ()) -> str:
    """``text`` with every secret it carries replaced by ``<redacted>`` (see module docstring)."""
    if not isinstance(text, str):
        text = str(text)
    for secret in _known_secrets(extra):
        text = text.replace(secret, REDACTED)
    text = _USERINFO.sub(r"\1" + REDACTED + "@", text)
    text = _QUERY.sub(r"\1" + REDACTED, text)
    text = _AUTH.sub(r"\1" + REDACTED, text)
    text = _PAIR.sub(r"\1" + REDACTED, text)
    text = _BEARER.sub(r"\1 " + REDACTED, text)
    return _AWS_KEY_ID.sub(REDACTED, text)


def scrub_exception(exc: BaseException | None, extra: Iterable[str] = ()) -> None:
    """Scrub ``exc`` and every exception chained to it (``__cause__``, ``__context__``), in place.

    The message lives in ``args``; a string argument that carries a secret is
    replaced by its scrubbed form, so ``str()``, ``repr()`` and tracebacks of
    the chain are clean.
    """
    extra = tuple(extra)
    seen: set[int] = set()
    todo = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        try:
            args = tuple(scrub(a, extra) if isinstance(a, str) else a for a in e.args)
            if args != e.args:
                e.args = args
        except (AttributeError, TypeError):  # an exception type with read-only args keeps them
            pass
        for attr in ("filename", "filename2", "strerror"):
            value = getattr(e, attr, None)
            if isinstance(value, str) and scrub(value, extra) != value:
                try:
                    setattr(e, attr, scrub(value, extra))
                except (AttributeError, TypeError):
                    pass
        todo += [e.__cause__, e.__context__]


class ScrubFilter(logging.Filter):
    """Scrubs each record's message and traceback before a handler formats it."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError, KeyError):  # a bad format string: the handler reports it
            return True
        record.msg, record.args = scrub(message), None
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = scrub(logging.Formatter().formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = scrub(record.exc_text)
        if record.stack_info:
            record.stack_info = scrub(record.stack_info)
        return True


__all__ = ["REDACTED", "SECRET_ENV", "ScrubFilter", "register_secret", "scrub", "scrub_exception"]
