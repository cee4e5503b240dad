"""Shared by every test directory: under pytest-xdist each worker is one process per core, so
torch's CPU thread pool is cut to one thread per worker (two workers with two threads each on
two cores spin against each other: `check --backend torch-cpu` took 8.4 s that way and 3.1 s
with one thread per process).

Every test has a time limit (issue 62): a test that hangs (a broken --timeout path waiting on a plug-in
forever) fails in TIME_LIMIT_S seconds, or the seconds of its `@pytest.mark.time_limit(S)` (modules
that run plug-ins mark themselves), instead of hanging the suite. SIGALRM on the main thread; the
failure is pytest.fail, a BaseException, so the oracle's `except Exception` (a backend's error is a
failed check) does not swallow it."""

import gc
import os
import signal
import threading

import pytest

TIME_LIMIT_S = 600  # no test of `make test` comes near it; CI's whole run is 12 minutes


@pytest.fixture(autouse=True)
def time_limit(request):
    mark = request.node.get_closest_marker("time_limit")
    seconds = mark.args[0] if mark else TIME_LIMIT_S
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def expired(signum, frame):
        pytest.fail(f"{request.node.nodeid} ran past its time limit of {seconds} s (conftest.py time_limit)")

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def pytest_configure(config):
    config.addinivalue_line("markers", "time_limit(seconds): fail the test once it runs this long (conftest.py)")
    config.addinivalue_line("markers", "backend_suite: the property suite against a named backend (its own process)")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        try:
            import torch
        except ImportError:
            return
        torch.set_num_threads(1)


def pytest_collection_finish(session):
    """Once collected, every object alive (the imported torch, jax, hypothesis and the test modules)
    is moved out of the collector's sight (gc.freeze), and full collections come less often: a
    worker's time in the collector went from 5.9-6.9 s to 3.1-4.3 s over meta_tests/test_faults.py
    and tests/test_jax_model.py under -n 2 (gc.callbacks, 2026-12-05)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20000, 20, 20)


def pytest_collection_modifyitems(config, items):
    """The backends' property suites (tests/test_backend_suites.py, minutes each) first: xdist's
    worksteal hands them out at the start, and the short tests fill the other cores around them."""
    items.sort(key=lambda item: item.get_closest_marker("backend_suite") is None)  # stable: else as collected
