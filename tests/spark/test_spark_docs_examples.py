"""The Spark examples of the docs run as written (the rest: tests/api/test_api_docs_examples.py).

Each page's Spark blocks run in order in one namespace (tests/doc_examples.py) on the shared
local session, with ``s3://bucket/`` and the streaming example's ``/jobs/`` rewritten to a
temporary directory (the session's workers started before this test could give them S3
credentials). GIVEN holds what a page takes as given: the DataFrame ``df``, a database at
``url`` with a checkpoint ``cp``, a stream ``events``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from doc_examples import PageRun, pages, python_blocks, track_opens

pytestmark = pytest.mark.spark

GIVEN: dict[str, str] = {
    "docs/spark.md": """
import json, os
import shaledb
url = "s3://bucket/db"
with shaledb.Db.open(url) as _db:
    _db.put(b"k0", b"before the ingest")
cp = shaledb.admin.create_checkpoint(url)
df = spark.createDataFrame(
    [("k1", "1", "v1"), ("k2", "2", "v2")], "key string, id string, value string"
)
os.makedirs("/jobs/events-in")
with open("/jobs/events-in/part-0.json", "w") as f:
    f.write(json.dumps({"id": "e1", "payload": "p1"}) + "\\n")
events = spark.readStream.schema("id string, payload string").json("/jobs/events-in")
""",
    "docs/service.md": """
import shaledb
url = "s3://bucket/feed-db"
with shaledb.Db.open(url) as _db:
    _db.put(b"a", b"1")
""",
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("page", [p for p in pages() if python_blocks(p, spark=True)])
def test_the_spark_examples_run(
    page: str, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("pyspark")
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "store"

    def rewrite(code: str) -> str:
        return code.replace("s3://bucket/", f"{root}/").replace('"/jobs/', f'"{tmp_path}/jobs/')

    run = PageRun.start(page, rewrite)
    run.namespace["spark"] = spark
    opened = track_opens(monkeypatch.setattr)
    try:
        run.run_source(rewrite(GIVEN[page]))
        for block in python_blocks(page, spark=True):
            if not block.skip:
                run.run_block(block)
        ns = run.namespace
        if page == "docs/spark.md":
            q = ns["q"]
            q.processAllAvailable()
            import shaledb

            with shaledb.DbReader.open(str(root / "events")) as reader:
                assert reader.get(b"e1") == b"p1"
            rows = {r.key: r.value for r in spark.sql("SELECT key, value FROM kv").collect()}
            assert rows == {b"k1": b"v1", b"k2": b"v2"}, rows  # the overwrite replaced all
        else:
            assert ns["stream"].isStreaming
    finally:
        for q in spark.streams.active:
            q.stop()
        spark.sql("DROP TABLE IF EXISTS kv")
        run.close(opened)
