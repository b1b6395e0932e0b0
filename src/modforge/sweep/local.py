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
import functools
import os
import shlex
import signal
import subprocess
import sys
import time
from datetime import datetime

from ..core.child_process import safe_child_env
from ..core.safe_files import ensure_folder, open_append
from .command import TrialJob
from .executor import ExecutorOptions, TrialOutcome, default_threads, register_executor
from .warm_trials import WarmTrial, WarmTrials

__all__ = ["LocalExecutor", "start_trial", "stop_trials"]

_PR_SET_PDEATHSIG = 1
_STOP_GRACE_S = 10.0


@functools.cache
def _prctl():
    """libc's ``prctl`` (resolved once, in the parent: the child only calls it), or ``None`` off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        return libc.prctl
    except (OSError, AttributeError):
        return None


def _child_setup(prctl, parent: int):
    """What a trial process runs between fork and exec: ask the kernel for SIGTERM when
    ``parent`` dies, and exit if it already has (no allocation-heavy work here)."""

    def setup() -> None:
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os._exit(1)

    return setup


def start_trial(job: TrialJob, keep_fds: tuple[int, ...] = (), *, note: str = "", cwd: str | None = None,
                warm: WarmTrials | None = None) -> subprocess.Popen | WarmTrial:  # fmt: skip
    """Start ``job.argv()`` (decided now, from the trial folder as it is) as a child of this
    process, its output appended to ``job.log`` under a ``# TIME [note] COMMAND`` line.

    The child gets its own session (a Ctrl-C reaches only this process, which stops the
    trial itself), the parent-death signal (SIGTERM when this process dies, SIGKILL
    included; Linux), and the file descriptors ``keep_fds`` (locks it must hold until it ends).
    The log is appended through :func:`~modforge.core.safe_files.open_append` (never through a
    link), and the child gets ``PYTHONSAFEPATH=1`` (with the ``-P`` of its command: no import
    from the cwd, in the trial and in the processes it starts). Used by the local pool and, on
    each Ray worker, by the Ray backend. With ``warm`` (the local pool's server, :mod:`.warm_trials`)
    a modforge command is forked from there, already imported, with all of the above; else, or
    when the server cannot, it starts cold.
    """
    argv = job.argv()
    ensure_folder(job.log.parent)
    with open_append(job.log) as log:
        stamp = datetime.now().isoformat(timespec="seconds")
        log.write(f"# {stamp} {f'[{note}] ' if note else ''}{shlex.join(argv)}\n")
        log.flush()
        if warm is not None and cwd is None:
            started = warm.start(argv, log.fileno(), keep_fds)
            if started is not None:
                return started
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            pass_fds=keep_fds, preexec_fn=_child_setup(_prctl(), os.getpid()), cwd=cwd,
            env=safe_child_env(PYTHONUNBUFFERED="1"),
        )  # fmt: skip


def stop_trials(processes: list[subprocess.Popen | WarmTrial], grace_s: float = _STOP_GRACE_S) -> None:
    """End each trial's whole process group: SIGTERM, then SIGKILL after ``grace_s``; return
    once every one has ended."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        for process in processes:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signum)  # the trial and everything it started
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(p.poll() is None for p in processes):
            time.sleep(0.05)
        if all(p.poll() is not None for p in processes):
            break


class LocalExecutor:
    """Trials as local processes (see the module docstring)."""

    def __init__(self, options: ExecutorOptions):
        self.workers = max(1, options.workers or 1)
        self.threads = default_threads(self.workers)
        self.keep_fds = tuple(options.keep_fds)
        self._running: dict[str, tuple[subprocess.Popen | WarmTrial, float]] = {}
        self._warm = WarmTrials(_child_setup(_prctl(), os.getpid())) if options.settings.get("warm", True) else None

    def free(self) -> int:
        return self.workers - len(self._running)

    def running(self) -> int:
        return len(self._running)

    def submit(self, job: TrialJob) -> None:
        process = start_trial(job, self.keep_fds, warm=self._warm)
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
        stop_trials([p for p, _ in self._running.values()])
        self._running.clear()
        if self._warm is not None:
            self._warm.close()


register_executor("local")(LocalExecutor)
