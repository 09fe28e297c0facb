"""An HTTP proxy that delays, resets and fails requests on their way to an object store.

:class:`FaultProxy` listens on 127.0.0.1 and forwards each HTTP/1.1 request
to one upstream server (the tests' S3 server). Clients point their endpoint
at :attr:`FaultProxy.url`. For every request it draws, from a seeded random
generator, one of:

* ``delay`` -- wait up to ``max_delay_s``, then forward normally;
* ``fail_before`` -- answer ``503 SlowDown`` without forwarding (nothing applied);
* ``reset_before`` -- drop the connection without forwarding (nothing applied);
* ``fail_after`` -- forward, let the server apply it, then answer ``500``
  instead of its response: the client cannot know the request took effect;
* ``reset_after`` -- forward, then drop the connection without an answer;
* ``pass`` -- forward and relay the response.

The "after" faults are the ones that matter for correctness: a conditional
put that succeeded but looks failed, a delete whose success is never seen.
The store's retries see them as transient errors, exactly as they would see
a real network fault. Each request is sent upstream on its own connection and
each answer closes the client's connection (``Connection: close``), which
every HTTP client handles, so no request is ever half-relayed on a shared
connection. :attr:`FaultProxy.counts` says how many faults of each kind were
injected; ``rates`` may be changed while it runs (all zero: a clean pipe).

The proxy runs its own asyncio loop in a daemon thread, so a synchronous test
or a writer in another process can use it.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

FAULTS: tuple[str, ...] = ("delay", "fail_before", "reset_before", "fail_after", "reset_after")


@dataclass
class _Request:
    head: bytes
    body: bytes


async def _read_request(reader: asyncio.StreamReader) -> _Request | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    headers = {
        k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)
    }
    body = b""
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        parts = []
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            chunk = await reader.readexactly(size + 2)
            parts.append(size_line + chunk)
            if size == 0:
                break
        body = b"".join(parts)
    # One request per upstream connection: ask the server to close after answering.
    kept = [lines[0]] + [
        line for line in lines[1:] if line and not line.lower().startswith(("connection:", "keep-alive:"))
    ]
    head = ("\r\n".join(kept) + "\r\nConnection: close\r\n\r\n").encode("latin-1")
    return _Request(head, body)


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP reset (SO_LINGER 0), the way a broken network ends a connection."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()


def _error_response(status: int, code: str) -> bytes:
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f"<Error><Code>{code}</Code><Message>injected by FaultProxy</Message></Error>"
    ).encode()
    reason = {500: "Internal Server Error", 503: "Service Unavailable"}[status]
    return (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + body


class FaultProxy:
    """See the module docstring. ``rates`` maps fault names (:data:`FAULTS`) to probabilities."""

    def __init__(
        self,
        upstream: str,
        *,
        seed: int,
        rates: Mapping[str, float] | None = None,
        max_delay_s: float = 0.2,
    ) -> None:
        u = urlsplit(upstream)
        self.upstream_host = u.hostname or "127.0.0.1"
        self.upstream_port = u.port or 80
        self.rng = random.Random(seed)
        self.rates: dict[str, float] = dict(rates or {})
        unknown = set(self.rates) - set(FAULTS)
        if unknown:
            raise ValueError(f"unknown fault(s) {sorted(unknown)}; known: {FAULTS}")
        self.max_delay_s = max_delay_s
        self.counts: Counter[str] = Counter()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def faults_injected(self) -> int:
        return sum(n for k, n in self.counts.items() if k != "pass")

    def _draw(self) -> str:
        x = self.rng.random()
        for name in FAULTS:
            p = self.rates.get(name, 0.0)
            if x < p:
                return name
            x -= p
        return "pass"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            req = await _read_request(reader)
            if req is None:
                writer.close()
                return
            fault = self._draw()
            self.counts[fault] += 1
            if fault == "delay":
                await asyncio.sleep(self.rng.uniform(0, self.max_delay_s))
            if fault == "fail_before":
                writer.write(_error_response(503, "SlowDown"))
                await writer.drain()
                writer.close()
                return
            if fault == "reset_before":
                _abort(writer)
                return
            up_r, up_w = await asyncio.open_connection(self.upstream_host, self.upstream_port)
            try:
                up_w.write(req.head + req.body)
                await up_w.drain()
                response = await up_r.read()  # the server closes after answering
            finally:
                up_w.close()
            if fault == "fail_after":
                writer.write(_error_response(500, "InternalError"))
            elif fault == "reset_after":
                _abort(writer)
                return
            else:
                writer.write(response)
            await writer.drain()
            writer.close()
        except (ConnectionError, asyncio.IncompleteReadError, OSError):
            _abort(writer)

    # ------------------------------------------------------------ lifecycle

    def start(self) -> FaultProxy:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            self._server = loop.run_until_complete(
                asyncio.start_server(self._handle, "127.0.0.1", 0, limit=1 << 20)
            )
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            loop.run_forever()
            self._server.close()
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.run_until_complete(self._server.wait_closed())
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        self._thread = threading.Thread(target=run, name="fault-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("fault proxy did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = ["FAULTS", "FaultProxy"]
