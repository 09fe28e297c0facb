"""Child processes of the change-feed tests: a writer that writes until killed or fenced,
and a consumer that applies the feed to a state file it replaces atomically with its cursor."""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

from shaledb import Db, FencedError, Settings, WriteBatch
from shaledb.engine.changes import open_changes


def writer(url: str, seed: int, tag: str) -> None:
    rng = random.Random(seed)
    settings = Settings(
        compactor=None, garbage_collector=None, l0_sst_size_bytes=64 * 1024, max_unflushed_bytes=1 << 20
    )
    with Db.open(url, settings=settings) as db:
        print("open", flush=True)
        i = 0
        try:
            while True:
                time.sleep(0.002)  # a few hundred writes a second: enough to interleave with the test
                i += 1
                k = b"k%03d" % rng.randrange(200)
                r = rng.random()
                if r < 0.6:
                    db.put(k, b"%s-%d" % (tag.encode(), i), durable=rng.random() < 0.5)
                elif r < 0.8:
                    db.delete(k, durable=rng.random() < 0.5)
                else:
                    b = WriteBatch()
                    for j in range(rng.randrange(1, 6)):
                        kk = b"k%03d" % rng.randrange(200)
                        if rng.random() < 0.8:
                            b.put(kk, b"%s-%d-%d" % (tag.encode(), i, j))
                        else:
                            b.delete(kk)
                    db.write(b)
        except FencedError:
            print("fenced", flush=True)


def consumer(url: str, state_path: str, chunk: int, rounds: int) -> None:
    """Apply up to ``rounds`` chunks of changes; after each, replace the state file
    (the consumer's output and its cursor together, one atomic rename)."""
    path = Path(state_path)
    state = json.loads(path.read_text()) if path.exists() else {"cursor": None, "data": {}, "log": []}
    with open_changes(url, state["cursor"], follow=False) as feed:
        for _ in range(rounds):
            changes = feed.read(chunk)
            if not changes:
                break
            for c in changes:
                if c.kind == "put":
                    assert c.value is not None
                    state["data"][c.key.hex()] = c.value.hex()
                else:
                    state["data"].pop(c.key.hex(), None)
                state["log"].append([c.seq, c.batch_index])
            state["cursor"] = str(feed.cursor)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(state))
            os.replace(tmp, path)
            print("applied", len(changes), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "writer":
        writer(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        consumer(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
