"""The local executor: trials as child processes of the sweep, ``workers`` at a time.

No trial outlives the sweep: each starts in its own session (a Ctrl-C reaches the sweep,
which stops the trials itself) with the parent-death signal set on Linux (the kernel sends
it SIGTERM if the sweep dies, SIGKILL of the sweep included), and :meth:`shutdown` ends each
trial's whole process group. Every trial process also inherits the sweep folder's lock
(:mod:`.lock`), so a restarted sweep waits until the last process of the killed one is gone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shlex
import signal
import subprocess
import sys
import time
from datetime import datetime

from .command import TrialJob
from .executor import ExecutorOptions, TrialOutcome, register_executor

__all__ = ["LocalExecutor"]

_PR_SET_PDEATHSIG = 1
_STOP_GRACE_S = 10.0


def _prctl():
    """libc's ``prctl`` (resolved in the parent: the child only calls it), or ``None`` off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        return libc.prctl
    except (OSError, AttributeError):
        return None


class LocalExecutor:
    """Trials as local processes (see the module docstring)."""

    def __init__(self, options: ExecutorOptions):
        self.workers = max(1, options.workers)
        self.keep_fds = tuple(options.keep_fds)
        self._prctl = _prctl()
        self._running: dict[str, tuple[subprocess.Popen, float]] = {}

    def free(self) -> int:
        return self.workers - len(self._running)

    def running(self) -> int:
        return len(self._running)

    def _child_setup(self, parent: int):
        prctl = self._prctl

        def setup() -> None:  # runs in the child between fork and exec: no allocation-heavy work
            if prctl is not None:
                prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
            if os.getppid() != parent:  # the sweep died before the signal was armed
                os._exit(1)

        return setup

    def submit(self, job: TrialJob) -> None:
        argv = job.argv()
        job.log.parent.mkdir(parents=True, exist_ok=True)
        with job.log.open("a") as log:
            log.write(f"# {datetime.now().isoformat(timespec='seconds')} {shlex.join(argv)}\n")
            log.flush()
            process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                pass_fds=self.keep_fds, preexec_fn=self._child_setup(os.getpid()),
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )  # fmt: skip
        self._running[job.trial_id] = (process, time.perf_counter())

    def wait(self, timeout: float) -> list[TrialOutcome]:
        deadline = time.monotonic() + timeout
        while True:
            ended = []
            for trial_id, (process, started) in list(self._running.items()):
                code = process.poll()
                if code is not None:
                    del self._running[trial_id]
                    ended.append(TrialOutcome(trial_id, code, time.perf_counter() - started))
            if ended or not self._running or time.monotonic() >= deadline:
                return ended
            time.sleep(0.05)

    def shutdown(self) -> None:
        processes = [p for p, _ in self._running.values()]
        for signum in (signal.SIGTERM, signal.SIGKILL):
            for process in processes:
                if process.poll() is None:
                    try:
                        os.killpg(process.pid, signum)  # the trial and everything it started
                    except ProcessLookupError:
                        pass
            deadline = time.monotonic() + _STOP_GRACE_S
            while time.monotonic() < deadline and any(p.poll() is None for p in processes):
                time.sleep(0.05)
            if all(p.poll() is not None for p in processes):
                break
        self._running.clear()


register_executor("local")(LocalExecutor)
