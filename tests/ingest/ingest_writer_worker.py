"""A live writer process for the bulk-ingest ordering test (not collected by pytest).

    python ingest_writer_worker.py URL MODE

Writes durable puts ``w<6 digits>`` -> ``writer`` in a loop and prints
``ack <n>`` after each one is acknowledged. When fenced it prints
``fenced <message>``; MODE "stop" then exits, MODE "reopen" waits for a
``reopen`` line on stdin, opens the database again (as a restarting service
would), prints ``reopened`` and writes on until stdin closes.
"""

from __future__ import annotations

import select
import sys


def main() -> int:
    url, mode = sys.argv[1], sys.argv[2]
    from shaledb import Db, FencedError, Settings

    settings = Settings(compactor=None, garbage_collector=None, flush_interval_s=0.005)
    db = Db.open(url, settings=settings)
    n = 0
    while True:
        try:
            db.put(b"w%06d" % n, b"writer")
        except FencedError as exc:
            print(f"fenced {exc}", flush=True)
            db.close()
            if mode == "stop":
                return 0
            if sys.stdin.readline().strip() != "reopen":
                return 1
            db = Db.open(url, settings=settings)
            print("reopened", flush=True)
            mode = "stop"
            continue
        print(f"ack {n}", flush=True)
        n += 1
        if select.select([sys.stdin], [], [], 0)[0] and not sys.stdin.readline():
            db.close()
            return 0


if __name__ == "__main__":
    sys.exit(main())
