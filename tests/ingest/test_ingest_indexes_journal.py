"""Bulk ingest with secondary index terms and value-journal objects (no Spark).

The index is checked against a model: for every key, the terms of its current
version; ``index_query`` over every field must list exactly the model's
(term, key) pairs after any mix of ingests (claims over indexed data
included), puts with and without ``indexes=``, deletes, compaction and GC.
"""

from __future__ import annotations

import random

import pytest
from ingest_kit import QUIET, contents, latest

from shaledb import Compactor, Db, GarbageCollector, GcOptions, Settings
from shaledb.bulk.ingest import abort_ingest, begin_ingest, commit_ingest, ingest_columns, write_part
from shaledb.bulk.ingest.outputs import TermsPlanner
from shaledb.bulk.read import plan_read, read_part, values_and_metadata
from shaledb.errors import InvalidArgument, NotFound, ObjectNotFound
from shaledb.format import paths
from shaledb.settings import CompactorOptions
from shaledb.store import open_store
from shaledb.testing.seeds import test_seed

FIELDS = ("dest", "tail")
TERMS = [b"LAX", b"JFK", b"SFO", b"BOS", b"N1", b"N2", b"\x00zero", b"\xffhigh"]


@pytest.fixture
def url(tmp_path):
    return str(tmp_path / "db")


def compact(url: str) -> None:
    c = Compactor.open(url, CompactorOptions(min_l0_ssts=1, max_space_amplification=0.01))
    for _ in range(6):
        if not c.run_once().did_work:
            break


def index_pairs(db, field: str) -> set[tuple[bytes, bytes]]:
    return set(db.index_query(field, None, None, return_terms=True))


def model_pairs(model: dict[bytes, dict[str, tuple[bytes, ...]]], field: str) -> set[tuple[bytes, bytes]]:
    return {(t, k) for k, terms in model.items() for t in terms.get(field, ())}


def check_index(db, model) -> None:
    for f in FIELDS:
        assert index_pairs(db, f) == model_pairs(model, f), f
    for k, terms in model.items():
        h = db.head(k)
        assert h is not None and dict(h.indexes) == terms, k


def random_terms(rng: random.Random) -> list[bytes] | None:
    r = rng.random()
    if r < 0.2:
        return None
    return rng.sample(TERMS, rng.randrange(0, 3))


def test_ingested_terms_match_a_model_across_ingests_puts_compaction(url):
    seed = test_seed()
    rng = random.Random(seed)
    universe = [b"k%03d" % i for i in range(120)]
    model: dict[bytes, dict[str, tuple[bytes, ...]]] = {}
    values: dict[bytes, bytes] = {}
    for step in range(8):
        keys = sorted(rng.sample(universe, rng.randrange(10, 60)))
        vals = [rng.randbytes(rng.choice([5, 50])) for _ in keys]
        fields = FIELDS if step % 3 != 2 else ()  # some ingests bring no terms: the keys keep theirs
        cols = {f: [random_terms(rng) for _ in keys] for f in fields}
        cut = len(keys) // 2
        plan = begin_ingest(url, index_fields=fields)
        st = open_store(url)
        parts = [
            write_part(
                st, plan, i, keys[a:b], vals[a:b], indexes={f: c[a:b] for f, c in cols.items()} or None
            )
            for i, (a, b) in enumerate(((0, cut), (cut, len(keys))))
        ]
        commit_ingest(plan, parts, url)
        for i, k in enumerate(keys):
            terms = dict(model.get(k, {}))
            for f in fields:
                ts = cols[f][i]
                if ts:
                    terms[f] = tuple(sorted(set(ts)))
                else:
                    terms.pop(f, None)
            model[k] = terms
            values[k] = vals[i]
        assert not latest(url).checkpoints, "the ingest's terms checkpoint outlived its commit"
        with Db.open(url, settings=QUIET) as db:
            check_index(db, model)
            for k in rng.sample(universe, 10):  # the writer computes removals from ingested terms
                if rng.random() < 0.3:
                    db.delete(k)
                    model.pop(k, None)
                    values.pop(k, None)
                elif rng.random() < 0.5:
                    ts = random_terms(rng)
                    db.put(k, b"p", indexes={"dest": ts or []})
                    terms = dict(model.get(k, {}))
                    if ts:
                        terms["dest"] = tuple(sorted(set(ts)))
                    else:
                        terms.pop("dest", None)
                    model[k], values[k] = terms, b"p"
                else:
                    db.put(k, b"q")  # a plain put keeps every term
                    model[k], values[k] = dict(model.get(k, {})), b"q"
            check_index(db, model)
        if step % 2:
            compact(url)
    with Db.open(url, settings=QUIET) as db:
        check_index(db, model)
    assert contents(url) == values


def test_behind_mode_refuses_index_terms_and_bad_terms_are_refused(url):
    with pytest.raises(InvalidArgument, match="behind"):
        begin_ingest(url, behind=True, index_fields=("dest",))
    with pytest.raises(InvalidArgument, match="field"):
        begin_ingest(url, index_fields=("",))
    with pytest.raises(InvalidArgument, match="bytes"):
        ingest_columns(url, [b"a"], [b"1"], indexes={"dest": ["LAX"]})
    with pytest.raises(InvalidArgument):
        ingest_columns(url, [b"a"], [b"1"], indexes={"dest": [[b""]]})  # a term is 1.. bytes
    for bad in (b"", b"t" * 65536):  # one term per row (bytes or None): the columns' fast check
        with pytest.raises(InvalidArgument, match=r"empty|at most"):
            ingest_columns(url, [b"a", b"b"], [b"1", b"2"], indexes={"dest": [None, bad]})
    with pytest.raises(InvalidArgument, match="differ in length"):
        ingest_columns(url, [b"a", b"b"], [b"1", b"2"], indexes={"dest": [None]})
    plan = begin_ingest(url, index_fields=("dest",))
    with pytest.raises(InvalidArgument, match="index_fields"):
        write_part(open_store(url), plan, 0, [b"a"], [b"1"], indexes={"other": [[b"x"]]})
    with pytest.raises(InvalidArgument, match="pass indexes"):
        write_part(open_store(url), plan, 0, [b"a"], [b"1"])
    abort_ingest(plan, [], url)
    with pytest.raises(NotFound):  # each begin created the database, and its abort deleted it again
        contents(url)


def test_fresh_terms_path_gives_the_general_paths_bytes():
    """A database without terms takes TermsPlanner's cached path; it must give exactly the
    rows' TERMS extras and index entries the general path gives with no old terms."""
    rng = random.Random(test_seed())
    keys = sorted({bytes(rng.randrange(256) for _ in range(rng.randrange(1, 6))) for _ in range(400)})
    n = len(keys)
    cols = {
        "dest": [rng.choice([None, rng.choice(TERMS)]) for _ in range(n)],  # the one-term check
        "tail": [random_terms(rng) for _ in range(n)],  # lists (with repeats) and None
        "a-first": [rng.choice([None, [], [rng.choice(TERMS)] * 2]) for _ in range(n)],
    }
    fresh = TermsPlanner(tuple(cols), None)
    general = TermsPlanner(tuple(cols), lambda k: {})
    for lo in range(0, n, 97):  # several chunks: the caches carry over
        chunk = {f: c[lo : lo + 97] for f, c in cols.items()}
        assert fresh.rows(keys[lo : lo + 97], chunk) == general.rows(keys[lo : lo + 97], chunk)
    # The same entries; the order within a row differs (they are sorted before writing).
    assert sorted(zip(fresh.index_keys, fresh.index_kinds)) == sorted(
        zip(general.index_keys, general.index_kinds)
    )
    assert len(fresh.index_keys) > n  # most rows have terms


def test_abort_drops_the_terms_checkpoint_and_every_output(url):
    ingest_columns(url, [b"a", b"b"], [b"1", b"2"], indexes={"dest": [[b"X"], [b"Y"]]})
    plan = begin_ingest(url, index_fields=("dest",), settings=Settings(value_separation_threshold=100))
    assert plan.terms_checkpoint is not None
    assert [str(c.id) for c in latest(url).checkpoints] == [plan.terms_checkpoint]
    st = open_store(url)
    part = write_part(st, plan, 0, [b"a", b"c"], [b"x" * 500, b"y"], indexes={"dest": [[b"Z"], None]})
    assert part.index_ssts and part.journal
    assert abort_ingest(plan, [part], url) == len(part.ssts) + len(part.index_ssts) + len(part.journal)
    assert not latest(url).checkpoints
    for j in part.journal:
        with pytest.raises(ObjectNotFound):
            st.head(paths.journal_path(j.id))
    with Db.open(url, settings=QUIET) as db:
        assert db.index_query("dest", None, None, return_terms=True) == [(b"X", b"a"), (b"Y", b"b")]


def test_large_values_go_to_journal_objects_and_survive_gc_and_compaction(url):
    seed = test_seed()
    rng = random.Random(seed)
    keys = sorted({rng.randbytes(8) for _ in range(400)})
    vals = [rng.randbytes(rng.choice([10, 3000, 9000])) for _ in keys]
    metas = [None if i % 4 else b"m%d" % i for i in range(len(keys))]
    settings = Settings(value_separation_threshold=2048, block_size_bytes=4096)
    plan = begin_ingest(url, settings=settings, max_sst_size_bytes=256 * 1024)
    st = open_store(url)
    cut = len(keys) // 2
    parts = [
        write_part(st, plan, 0, keys[:cut], vals[:cut], metas[:cut]),
        write_part(st, plan, 1, keys[cut:], vals[cut:], metas[cut:]),
    ]
    assert all(len(p.journal) >= 2 for p in parts)  # cut at max_sst_size_bytes
    inline = sum(s.size for p in parts for s in p.ssts)
    assert inline < sum(len(v) for v in vals if len(v) < 2048) + 64 * len(keys) + 65536
    res = commit_ingest(plan, parts, url)
    # The commit line counted journal objects as SSTs ("400 rows in 9 SSTs" for 2 SSTs).
    njournal, nssts = sum(len(p.journal) for p in parts), sum(len(p.ssts) for p in parts)
    assert (res.ssts, res.journal) == (nssts, njournal)
    assert f" in {nssts} SST{'s' if nssts > 1 else ''} and {njournal} journal objects (" in res.describe()
    m = latest(url)
    assert {j.id for j in m.journal} == {j.id for p in parts for j in p.journal}
    expect = dict(zip(keys, vals))
    with Db.open(url, settings=QUIET) as db:
        for k, v, meta in zip(keys, vals, metas):
            h = db.head(k)
            assert h is not None and h.in_journal == (len(v) >= 2048) and h.value_size == len(v)
            assert h.metadata == meta
            assert db.get(k) == v
        assert dict(db.scan()) == expect
    assert contents(url) == expect  # DbReader resolves pointers too
    rows = {}
    for part in plan_read(url, partitions=3).parts:
        for ks, _seqs, kinds, pays in read_part(part, url):
            rows.update(zip(ks, values_and_metadata(kinds, pays)[0]))
    assert rows == expect  # and the Spark reader's partitions
    GarbageCollector.open(url, GcOptions(min_age_s=0)).run_once()
    compact(url)
    GarbageCollector.open(url, GcOptions(min_age_s=0)).run_once()
    with Db.open(url, settings=QUIET) as db:
        assert dict(db.scan()) == expect
        for k, v in zip(keys, vals):  # the ingest's journal objects go mostly dead
            if len(v) >= 2048 and rng.random() < 0.9:
                db.put(k, b"small")
                expect[k] = b"small"
        db.flush(memtable=True)
        report = db.compact_journal()
        assert report.bytes_reclaimed > 0, report.to_dict()
        assert dict(db.scan()) == expect


def test_ingest_clears_journal_complete(url):
    with Db.open(url, settings=QUIET.replace(value_separation_threshold=16)) as db:
        db.put(b"a", b"x" * 100)
        db.flush(memtable=True)
    assert dict(latest(url).options).get("journal.complete") == "1"
    ingest_columns(url, [b"b"], [b"small"])
    assert dict(latest(url).options).get("journal.complete") == "0"
