"""A writer or reader process of the chaos tests, talking to the store through a fault proxy.

    python -m shaledb.testing.chaos_worker writer|reader URL LEDGER SEED VERSION

The store's endpoint comes from the environment (``AWS_ENDPOINT_URL`` pointing
at a :class:`~shaledb.testing.faultproxy.FaultProxy`). Unlike the soak's
processes these survive errors: when a call fails after the store's retries
(``Unavailable``, or ``FencedError``), the process logs ``{"err": ...}`` and
opens a new handle, which for the writer starts a new *session*
(``{"open": s}``, logged once the open returned: from then on nothing of
an earlier session may still take effect). The writer logs its writes as
:class:`~shaledb.testing.soak_worker.Writes` does; the reader logs every
scan as ``{"r": {key: value}, "t0": call time}`` with the record's ``t``
as its return time. Both run until killed.
"""

from __future__ import annotations

import random
import sys
import time
from typing import Any

from .ledger import Ledger
from .soak_worker import Writes, settings_for


def _close(h: Any) -> None:
    try:
        h.close()
    except Exception:  # noqa: BLE001 - the handle is being abandoned after a failure
        pass


def writer(url: str, ledger: Ledger, rng: random.Random, version: int) -> None:
    import shaledb

    writes = Writes(ledger, rng, version, False)
    session = 0
    while True:
        try:
            db = shaledb.Db.open(url, settings=settings_for(False), seed=rng.randrange(1 << 62))
        except shaledb.ShaleError as exc:
            ledger.log({"open_err": repr(exc)[:200]})
            time.sleep(0.05)
            continue
        session += 1
        ledger.log({"open": session, "ready": 1})
        pending: list[tuple[int, Any]] = []
        try:
            while True:
                writes.one(db, pending)
        except shaledb.ShaleError as exc:
            ledger.log({"err": repr(exc)[:200]})
            _close(db)


def reader(url: str, ledger: Ledger) -> None:
    import shaledb

    while True:
        try:
            r = shaledb.DbReader.open(url, manifest_poll_interval=0.05)
        except shaledb.ShaleError as exc:
            ledger.log({"open_err": repr(exc)[:200]})
            time.sleep(0.05)
            continue
        ledger.log({"ready": 1})
        try:
            while True:
                t0 = time.monotonic()
                seen = {k.decode("latin-1"): v.decode("latin-1") for k, v in r.scan()}
                ledger.log({"r": seen, "t0": t0})
                time.sleep(0.01)
        except shaledb.ShaleError as exc:
            ledger.log({"err": repr(exc)[:200]})
            _close(r)


def main(argv: list[str]) -> int:
    role, url, path, seed, version = argv
    ledger = Ledger(path)
    if role == "writer":
        writer(url, ledger, random.Random(int(seed)), int(version))
    else:
        reader(url, ledger)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
