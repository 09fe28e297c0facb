"""Ctrl-C ends a command promptly, also while a store request hangs (``shaledb.cli.interrupt``).

The store here is an endpoint that accepts connections and never answers, so the command's
first request blocks the main thread inside obstore until the 30 s request timeout: before,
Ctrl-C took effect only then (27 s after it was pressed, then a ``put`` closed its writer
through the same silent store).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

# The process a terminal user runs: SIGINT raises KeyboardInterrupt (a child of a runner started
# in the background would inherit SIGINT ignored), then the console script's entry point.
CLI = [
    sys.executable,
    "-c",
    "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from shaledb.cli import main; sys.exit(main())",
]


@contextmanager
def _silent_endpoint() -> Iterator[tuple[str, threading.Event]]:
    """An endpoint that accepts connections and never answers; the event is set on the first."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted = threading.Event()
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)
            accepted.set()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}", accepted
    finally:
        server.close()
        for conn in held:
            conn.close()


@pytest.mark.parametrize("command", [["scan"], ["put", "k", "v"]], ids=["scan", "put"])
def test_ctrl_c_while_a_request_hangs_ends_the_command_at_once(command: list[str]) -> None:
    with _silent_endpoint() as (endpoint, accepted):
        env = {
            **os.environ,
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": "x",
            "AWS_SECRET_ACCESS_KEY": "x",
            "AWS_REGION": "us-east-1",
        }
        proc = subprocess.Popen(
            [*CLI, "--path", "s3://bucket/db", *command],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            assert accepted.wait(60), "the command never reached the store"
            proc.send_signal(signal.SIGINT)
            # Well inside the 30 s request timeout that ended it before.
            _, err = proc.communicate(timeout=15)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 130, err
    assert err.strip().splitlines() == ["shaledb: interrupted"], err
