"""A cancelled step of an async scan or change feed loses nothing.

A step's fetch runs on the executor; cancelling the await (``asyncio.wait_for`` timing
out, a cancelled task) used to drop the fetched chunk while the underlying iterator had
moved past it, so iteration went on silently skipping 256 rows (a scan) or up to 1,000
changes (a feed).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

from shaledb import aio


async def _cancel_one_step(it: AsyncIterator[Any]) -> None:
    step = asyncio.ensure_future(it.__anext__())
    await asyncio.sleep(0)  # the step's fetch is now on the executor
    step.cancel()
    try:
        await step
    except asyncio.CancelledError:
        pass
    await asyncio.sleep(0.05)


def test_a_cancelled_scan_step_skips_no_rows(mem_url: str) -> None:
    async def main() -> list[bytes]:
        async with await aio.Db.open(mem_url) as db:
            async with db.batch() as b:
                for i in range(1000):
                    b.put(b"k%05d" % i, b"v")
            scan = db.scan(prefix=b"k")
            await _cancel_one_step(scan)
            return [k async for k, _ in scan]

    keys = asyncio.run(main())
    assert keys == [b"k%05d" % i for i in range(1000)]


def test_a_cancelled_change_feed_step_skips_no_changes(mem_url: str) -> None:
    async def main() -> list[bytes]:
        async with await aio.Db.open(mem_url) as db:
            for j in range(4):
                async with db.batch() as b:
                    for i in range(500):
                        b.put(b"k%05d" % (j * 500 + i), b"v")
            async with db.changes(since=None, follow=False) as feed:
                await _cancel_one_step(feed)
                return [c.key async for c in feed]

    keys = asyncio.run(main())
    assert keys == [b"k%05d" % i for i in range(2000)]


def test_a_cancelled_close_still_closes(mem_url: str) -> None:
    async def main() -> tuple[bool, bool]:
        db = await aio.Db.open(mem_url, workers=1)
        reader = await aio.DbReader.open(mem_url, workers=1)
        await db.put(b"k", b"v")
        gate = threading.Event()
        busy = [h._executor.submit(gate.wait, 10) for h in (db, reader)]  # the one worker is busy
        closes = [asyncio.ensure_future(db.close()), asyncio.ensure_future(reader.close())]
        await asyncio.sleep(0)  # each close is queued behind it
        for c in closes:
            c.cancel()
        await asyncio.gather(*closes, return_exceptions=True)
        gate.set()
        await asyncio.gather(*busy)
        await db.close()  # closing again does nothing: it must not leave the handle open
        await reader.close()
        for _ in range(100):
            if db.sync.closed and reader.sync.closed:
                break
            await asyncio.sleep(0.05)
        return db.sync.closed, reader.sync.closed

    assert asyncio.run(main()) == (True, True)
