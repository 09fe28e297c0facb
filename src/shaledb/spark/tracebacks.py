"""Errors of the stream source and sink as Spark shows them.

Spark prints a Python streaming source's or sink's exception with the whole
Python traceback (the batch source's honours
``spark.sql.execution.pyspark.udf.hideTraceback.enabled``, which
``local_session`` sets; the streaming runners do not): a user whose query
failed because the database is missing saw a dozen frames of the change
feed's internals before "NotFound: no database at ...". Our own errors
(``ShaleError``) carry a complete message, so :func:`short_traceback` drops
the frames below the method Spark called; any other exception keeps its
traceback, since that is a bug to report.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

from ..errors import ShaleError

F = TypeVar("F", bound=Callable[..., Any])


def short_traceback(fn: F) -> F:
    """``fn`` (a function or a generator function) raising its ``ShaleError``\\ s without the
    frames below it."""
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def generate(*args: Any, **kwargs: Any) -> Iterator[Any]:
            try:
                yield from fn(*args, **kwargs)
            except ShaleError as exc:
                raise exc.with_traceback(None) from None

        return cast(F, generate)

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ShaleError as exc:
            raise exc.with_traceback(None) from None

    return cast(F, call)


__all__ = ["short_traceback"]
