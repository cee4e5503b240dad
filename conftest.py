"""Shared by every test directory: under pytest-xdist each worker is one process per core, so
torch's CPU thread pool is cut to one thread per worker (two workers with two threads each on
two cores spin against each other: `check --backend torch-cpu` took 8.4 s that way and 3.1 s
with one thread per process)."""

import os


def pytest_configure(config):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        try:
            import torch
        except ImportError:
            return
        torch.set_num_threads(1)
