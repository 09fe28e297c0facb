"""A loopback HTTP/1.1 proxy that waits a fixed time before forwarding each request.

shaledb models S3's round trip with ``LatencyStore``, a wrapper inside its own store
stack; another engine's object store client (SlateDB's, in Rust) cannot be wrapped that
way, but it can be pointed at an endpoint. This proxy sits in front of the local S3
server (moto) and gives every engine the same injected delay: it reads a request's head,
sleeps ``delay_s``, then forwards the request upstream and streams the request and
response bodies through (Content-Length, chunked, or read-to-close), keeping one upstream
connection per client connection. It counts requests by method; ``GET
/__delay_proxy/stats`` returns those counts as JSON at once (no delay, not counted), so a
benchmark process can read them before and after a phase.

stdlib asyncio only, on its own thread: ``DelayProxy(upstream, 0.02).start()`` returns
the endpoint to give the client; ``stop()`` ends it.
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.parse
import urllib.request
from collections import Counter

STATS_PATH = "/__delay_proxy/stats"
CHUNK = 64 * 1024


def read_stats(endpoint: str) -> dict[str, int]:
    """The proxy's request counts by method (from any process)."""
    with urllib.request.urlopen(endpoint + STATS_PATH, timeout=10) as r:
        return {str(k): int(v) for k, v in json.loads(r.read()).items()}


def _headers(head: bytes) -> tuple[list[str], dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    out: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            out[name.strip().lower()] = value.strip()
    return lines, out


async def _pump(
    src: asyncio.StreamReader, dst: asyncio.StreamWriter, hdrs: dict[str, str], to_close: bool
) -> bool:
    """Copy one message body; True if it was delimited by closing the connection."""
    if "chunked" in hdrs.get("transfer-encoding", "").lower():
        while True:
            size_line = await src.readuntil(b"\r\n")
            dst.write(size_line)
            size = int(size_line.split(b";")[0].strip(), 16)
            if size == 0:
                while True:  # trailers, then the empty line
                    line = await src.readuntil(b"\r\n")
                    dst.write(line)
                    if line == b"\r\n":
                        break
                await dst.drain()
                return False
            dst.write(await src.readexactly(size + 2))
            await dst.drain()
    if "content-length" in hdrs:
        left = int(hdrs["content-length"])
        while left:
            data = await src.read(min(CHUNK, left))
            if not data:
                raise ConnectionError("body cut short")
            dst.write(data)
            left -= len(data)
            await dst.drain()
        return False
    if not to_close:
        return False  # a request without a length has no body
    while data := await src.read(CHUNK):
        dst.write(data)
        await dst.drain()
    return True


class DelayProxy:
    """Forward every HTTP request to ``upstream`` after ``delay_s`` seconds."""

    def __init__(self, upstream: str, delay_s: float) -> None:
        u = urllib.parse.urlsplit(upstream)
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or 80
        self.delay_s = delay_s
        self.counts: Counter[str] = Counter()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="delay-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self.endpoint = ""

    def start(self) -> str:
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(asyncio.start_server(self._serve, "127.0.0.1", 0), self._loop)
        self._server = fut.result(10)
        self.endpoint = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self.endpoint

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _serve(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        ur: asyncio.StreamReader | None = None
        uw: asyncio.StreamWriter | None = None
        try:
            while True:
                head = await cr.readuntil(b"\r\n\r\n")
                lines, hdrs = _headers(head)
                method, target = lines[0].split(" ")[:2]
                if target.startswith(STATS_PATH):
                    body = json.dumps(dict(self.counts)).encode()
                    cw.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
                    cw.write(b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
                    await cw.drain()
                    return
                self.counts[method] += 1
                await asyncio.sleep(self.delay_s)
                if uw is None or ur is None or uw.is_closing():
                    ur, uw = await asyncio.open_connection(self.host, self.port)
                if hdrs.get("expect", "").lower() == "100-continue":
                    # Answer the client's wait ourselves; upstream gets the body without asking.
                    cw.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                    await cw.drain()
                    kept = [ln for ln in lines if not ln.lower().startswith("expect:")]
                    head = "\r\n".join(kept).encode("latin-1")
                uw.write(head)
                await _pump(cr, uw, hdrs, to_close=False)
                await uw.drain()
                while True:
                    rhead = await ur.readuntil(b"\r\n\r\n")
                    rlines, rhdrs = _headers(rhead)
                    status = int(rlines[0].split(" ")[1])
                    cw.write(rhead)
                    if status >= 200:
                        break
                closed = False
                if method != "HEAD" and status not in (204, 304):
                    closed = await _pump(ur, cw, rhdrs, to_close=True)
                await cw.drain()
                if (
                    closed
                    or "close" in rhdrs.get("connection", "").lower()
                    or rlines[0].startswith("HTTP/1.0")
                ):
                    return
                if "close" in hdrs.get("connection", "").lower():
                    return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            return
        finally:
            for w in (cw, uw):
                if w is not None:
                    w.close()
