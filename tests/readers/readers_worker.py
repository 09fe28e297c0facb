"""A reader process for ``test_readers_processes``: reads while the writer works, checks as it goes.

Usage: python readers_worker.py URL STORE_OPTIONS_JSON SEED

The writer updates whole groups atomically: every key of group ``g`` gets
the value ``b"<key>:<version>"`` in one batch, versions increasing. The
reader checks that every value names its own key, that the keys of a group
share one version in every scan (snapshot consistency), that the version of
every key never goes down (monotonic reads), and that no read fails (no
deleted object, no corruption). When it sees the key ``done`` it refreshes
once more and reports the final version of every group as JSON on stdout.
"""

from __future__ import annotations

import json
import random
import sys
import time
import traceback

from shaledb import DbReader

GROUPS = 20
KEYS_PER_GROUP = 5


def key(g: int, i: int) -> bytes:
    return b"g%02d/%d" % (g, i)


def main() -> int:
    url, opts_json, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rng = random.Random(seed)
    store_options = json.loads(opts_json) or None
    last: dict[bytes, int] = {}
    errors: list[str] = []
    reads = scans = 0

    def observe(k: bytes, v: bytes | None) -> int | None:
        if v is None:
            return None
        name, _, ver = v.rpartition(b":")
        if name != k:
            errors.append(f"{k!r} holds a value of {name!r}")
            return None
        n = int(ver)
        if n < last.get(k, -1):
            errors.append(f"{k!r} went back from version {last[k]} to {n}")
        last[k] = max(n, last.get(k, -1))
        return n

    deadline = time.monotonic() + 120
    r = DbReader.open(
        url,
        manifest_poll_interval_s=0.05,
        checkpoint_lifetime_s=3.0,
        store_options=store_options,
        seed=seed,
    )
    final: dict[str, int] = {}
    try:
        while time.monotonic() < deadline and not errors:
            if rng.random() < 0.15:
                scans += 1
                groups: dict[int, set[int]] = {}
                with r.scan(prefix=b"g") as it:
                    for k, v in it:
                        n = observe(k, v)
                        if n is not None:
                            groups.setdefault(int(k[1:3]), set()).add(n)
                for g, versions in groups.items():
                    if len(versions) != 1:
                        errors.append(f"scan saw group {g} at versions {sorted(versions)}")
            else:
                g = rng.randrange(GROUPS)
                k = key(g, rng.randrange(KEYS_PER_GROUP))
                observe(k, r.get(k))
                reads += 1
            if r.get(b"done") is not None:
                r.refresh()
                with r.snapshot() as s:
                    for g in range(GROUPS):
                        versions = {observe(key(g, i), s.get(key(g, i))) for i in range(KEYS_PER_GROUP)}
                        if len(versions) != 1:
                            errors.append(f"final snapshot saw group {g} at {versions}")
                        final[str(g)] = versions.pop() if len(versions) == 1 else -2  # type: ignore[assignment]
                break
        else:
            if not errors:
                errors.append("never saw the 'done' key")
    except Exception:
        errors.append(traceback.format_exc())
    finally:
        r.close()
    print(json.dumps({"errors": errors, "reads": reads, "scans": scans, "final": final, "stats": r.stats()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
