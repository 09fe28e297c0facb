"""Every shaledb error crosses a process boundary as itself: ``multiprocessing`` and
``concurrent.futures`` pickle a worker's exception to send it to the parent."""

from __future__ import annotations

import copy
import multiprocessing
import pickle

import pytest

import shaledb
import shaledb.bulk.ingest.model  # its errors join the tree walked below
import shaledb.compaction.compactor
import shaledb.errors as errors

SAMPLES: list[errors.ShaleError] = [
    errors.CorruptionError("bad checksum", "manifest/00000000000000000001.manifest"),
    errors.CorruptionError("bad checksum"),
    errors.ObjectNotFound("wal/00000000000000000007.sst"),
    errors.TransactionConflict(b"acct-1", "key b'acct-1' was written after the transaction began"),
    errors.HistoryUnavailable("seq 3 is older than the history window", 17),
    errors.PreconditionFailed("manifest/00000000000000000002.manifest"),
    errors.AlreadyExists("manifest/00000000000000000002.manifest"),
    errors.InvalidArgument.of_option("GcOptions.interval_s", "GcOptions.interval_s must be > 0"),
    errors.ExtraMissing("install 'shaledb[spark]'"),
]


def every_error_class() -> list[type[errors.ShaleError]]:
    seen: list[type[errors.ShaleError]] = []
    todo: list[type[errors.ShaleError]] = [errors.ShaleError]
    while todo:
        cls = todo.pop()
        if cls not in seen:
            seen.append(cls)
            todo.extend(cls.__subclasses__())
    return seen


def same(a: BaseException, b: BaseException) -> None:
    assert type(a) is type(b)
    assert str(a) == str(b)
    assert a.args == b.args
    assert vars(a) == vars(b)


@pytest.mark.parametrize("err", SAMPLES, ids=lambda e: type(e).__name__)
def test_an_error_with_attributes_pickles_and_copies_as_itself(err: errors.ShaleError) -> None:
    same(pickle.loads(pickle.dumps(err)), err)
    same(copy.copy(err), err)
    same(copy.deepcopy(err), err)


def test_every_error_class_pickles_as_itself() -> None:
    classes = every_error_class()
    assert len(classes) > 20
    for cls in classes:
        try:
            err = cls("a message")
        except TypeError:  # takes other arguments: covered by SAMPLES
            assert any(type(s) is cls for s in SAMPLES), f"add a sample of {cls.__name__}"
            continue
        same(pickle.loads(pickle.dumps(err)), err)


def raise_in_worker(index: int) -> None:
    raise SAMPLES[index]


def test_a_pool_worker_s_error_reaches_the_parent_whole() -> None:
    # Before, unpickling TransactionConflict in the pool's result thread raised TypeError
    # there, and ``get`` waited forever.
    with multiprocessing.get_context("fork").Pool(1) as pool:
        for index, sample in enumerate(SAMPLES):
            with pytest.raises(type(sample)) as caught:
                pool.apply_async(raise_in_worker, (index,)).get(timeout=60)
            same(caught.value, sample)
    assert issubclass(shaledb.TransactionConflict, shaledb.ShaleError)
