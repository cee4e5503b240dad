"""Where the verdict's NumPy work runs (oracle/judge/plans/worker.py): a background job's result and
exception come back, an Inbox carries a value to a job that already started (small and large,
to a forked child and to the helper thread), a cancelled Inbox raises in the job, and
`python -m oracle`'s exit (cli.exit_now) stops the children still running."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from oracle.judge.plans import worker

REPO = Path(__file__).resolve().parents[1]


def _twice(box):
    return 2 * box.get()


def _echo_pid(box):
    return os.getpid(), box.get()


@pytest.mark.parametrize("size", [3, 200_000])  # within the pipe's buffer, and past it (send waits for get)
def test_an_inbox_carries_a_value_to_a_forked_job(size):
    box = worker.Inbox()
    job = worker.background(_echo_pid, box)
    value = np.arange(size, dtype=np.float64)
    box.send(value)
    pid, got = job.result()
    assert np.array_equal(got, value)
    assert pid != os.getpid() if worker.forks() else pid == os.getpid()


def test_an_inbox_carries_a_value_to_the_helper_thread(monkeypatch):
    monkeypatch.setattr(worker, "forks", lambda: False)
    box = worker.Inbox()
    job = worker.background(_twice, box)
    box.send(np.ones(50_000))
    assert not isinstance(job, worker.Child) and np.array_equal(job.result(), np.full(50_000, 2.0))


def test_a_cancelled_inbox_raises_in_the_job():
    box = worker.Inbox()
    job = worker.background(_twice, box)
    box.cancel()
    with pytest.raises(RuntimeError, match="cancelled"):
        job.result()


def test_an_inbox_carries_one_value():
    box = worker.Inbox()
    box.send(1)
    with pytest.raises(AssertionError, match="one value"):
        box.send(2)
    assert box.get() == 1


def test_a_jobs_exception_comes_back():
    job = worker.background(int, "not a number")
    with pytest.raises(ValueError, match="not a number"):
        job.result()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="children are forked only where the platform forks")
def test_the_cli_exit_stops_the_children_still_running(tmp_path):
    """A job still waiting for its input when the CLI exits is killed, not left behind."""
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        from oracle.judge.plans import worker
        from oracle.cli import exit_now
        job = worker.background(lambda box: box.get(), worker.Inbox())
        print(job.pid, flush=True)
        exit_now(5)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 5, r.stderr
    pid = int(r.stdout.split()[0])
    with pytest.raises(ProcessLookupError):  # reaped by the CLI, not an orphan still waiting
        os.kill(pid, 0)
