"""Fixtures the Python tests share."""

import _thread
import signal
import threading
import time

import pytest


@pytest.fixture
def sigint():
    """Python's own SIGINT handler for the test: a process started with SIGINT ignored (a
    background job of a shell, some CI runners) has none, and `_thread.interrupt_main` then
    does nothing."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


@pytest.fixture
def interrupted_after(sigint):
    """``interrupted_after(delay, call)``: run ``call`` with a Ctrl-C
    (``_thread.interrupt_main``) sent ``delay`` seconds after it starts, assert that it raises
    ``KeyboardInterrupt``, and return the seconds it took to stop."""

    def run(delay: float, call) -> float:
        timer = threading.Timer(delay, _thread.interrupt_main)
        t0 = time.perf_counter()
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                call()
        finally:
            timer.cancel()
        return time.perf_counter() - t0

    return run
