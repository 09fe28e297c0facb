"""engine.latch.Latch: the one-shot latch a durable write waits on. A KeyboardInterrupt
(Ctrl-C) in its wait on the main thread must leave it working for the thread that sets it
(a threading.Event's wait could release the lock the setter held: "release unlocked lock")."""

from __future__ import annotations

import signal
import sys
import threading

import pytest

from shaledb.engine.latch import Latch


def test_set_wakes_every_waiter_and_later_waits_return_at_once() -> None:
    latch = Latch()
    assert not latch.is_set()
    assert latch.wait(0.01) is False
    woke: list[bool] = []
    threads = [threading.Thread(target=lambda: woke.append(latch.wait(60))) for _ in range(4)]
    for t in threads:
        t.start()
    latch.set()
    for t in threads:
        t.join(60)
    assert woke == [True] * 4
    assert latch.wait() and latch.is_set()
    latch.set()  # a second set is harmless


@pytest.mark.skipif(sys.platform == "win32", reason="delivers SIGINT to the main thread")
def test_a_ctrl_c_in_wait_leaves_the_latch_working() -> None:
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        latch = Latch()
        main = threading.main_thread().ident
        assert main is not None
        for _ in range(20):
            sender = threading.Timer(0.01, signal.pthread_kill, (main, signal.SIGINT))
            sender.start()
            with pytest.raises(KeyboardInterrupt):
                latch.wait(60)
            sender.join()
        setter = threading.Thread(target=latch.set)
        setter.start()
        setter.join(60)
        assert not setter.is_alive()
        assert latch.wait(60)
    finally:
        signal.signal(signal.SIGINT, before)
