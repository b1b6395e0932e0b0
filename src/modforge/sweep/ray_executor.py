"""The Ray executor (``--backend ray``): one Ray task per trial, on this machine or a cluster.

Each task runs on a Ray worker: it decides the trial's command there (:meth:`TrialJob.argv`:
resume from the trial folder's checkpoint, or start afresh) and runs it as a child process
with :func:`~.local.start_trial` — the parent-death signal set, so the trial process ends
when its Ray worker dies — its output appended to ``SWEEP/trials/<id>.log`` under a line
naming the worker (``# TIME [ray worker PID on HOST] COMMAND``).

Shared filesystem. The driver and every worker must see the sweep folder at the same path
(one machine, or a cluster with a shared filesystem, NFS or Lustre, and the same Python
environment with modforge at the same path): the trial's command, its config and its
folder are absolute paths, and the driver reads results from the trial folders.

Failures. A worker that dies (killed, out of memory, its node lost) is a system failure:
Ray runs the task again, up to ``max_retries`` times, and the new attempt resumes the trial
from its checkpoint. Before starting, an attempt takes the trial's lock
(``SWEEP/trials/.<id>.lock``, held by the trial process until it ends), so it never runs
beside a previous attempt's process that is still stopping. A trial whose command fails is
not retried (the same command would fail again): it is recorded with its error.

Safety. The local Ray instance listens on 127.0.0.1 only (:func:`init_local_ray`: an
unauthenticated Ray cluster reachable from the network runs whatever anyone submits). Only
``--ray-address`` names a cluster to connect to, never a sweep file. Ray adds the driver's
working directory to its workers' ``sys.path``: ``ray.init`` is called from a fresh empty
private folder instead, so a ``yaml.py`` where the sweep was started is never imported by a
worker, and the trial itself starts with ``-P``/``PYTHONSAFEPATH=1`` like a local one. The
trial's lock and log are opened without following links.

Resources. A trial reserves ``cpus_per_trial`` CPUs and ``gpus_per_trial`` GPUs per
training process (``--nproc N`` → N times as many) and runs ``cpus_per_trial`` torch threads
per process. Without an address the sweep starts a local Ray instance (no dashboard) with
every core this process may use (at least ``--workers × cpus_per_trial``), and stops it at
the end; with one (``auto``, ``HOST:6379``, ``ray://HOST:10001``) it connects to that
cluster and leaves it running. How many trials run at once is what the cluster's resources
hold, or ``--workers`` when given.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..core.cwd import working_directory
from ..core.errors import UsageError
from ..core.safe_files import ensure_folder, open_append, open_lock
from .command import TrialJob
from .executor import ExecutorOptions, TrialOutcome, default_threads, import_extra, register_executor
from .spec import RaySpec

__all__ = ["RayExecutor", "init_local_ray", "ray_settings", "run_trial"]

_OBJECT_STORE_BYTES = 128 * 1024**2  # trials pass no data through Ray: keep its shared memory small
_LOCK_WAIT_S = 600.0
_CANCEL_GRACE_S = 60.0


def ray_settings(settings: Mapping[str, Any]) -> RaySpec:
    """The Ray settings from :attr:`ExecutorOptions.settings` (unknown keys are an error)."""
    names = {f.name for f in dataclasses.fields(RaySpec)}
    unknown = set(settings) - names
    if unknown:
        raise UsageError(f"unknown Ray setting(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(names))})")
    return RaySpec(**{k: v for k, v in settings.items() if v is not None})


def _trial_lock(job: TrialJob) -> Path:
    return job.run_dir.with_name(f".{job.trial_id}.lock")


def _hold_trial_lock(job: TrialJob, wait_s: float = _LOCK_WAIT_S) -> int:
    """Lock the trial (waiting up to ``wait_s`` for a previous attempt's process to end); the descriptor.

    Raises:
        RuntimeError: the lock is still held after ``wait_s`` seconds.
    """
    import fcntl

    path = _trial_lock(job)
    ensure_folder(path.parent)
    fd = open_lock(path)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                raise RuntimeError(f"trial {job.trial_id}: a previous attempt's process still holds {path}") from None
            time.sleep(0.2)


_LOOPBACK = "127.0.0.1"
_CLUSTER_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # "0": Ray's node address is the loopback one


@contextlib.contextmanager
def _loopback_node(ray: Any) -> Iterator[None]:
    """While Ray starts: its node address is 127.0.0.1 (Ray otherwise resolves even an explicit
    loopback address to the machine's network address), for this process and the processes it starts."""
    constants = getattr(getattr(ray, "_private", None), "ray_constants", None)
    before_env, before = os.environ.get(_CLUSTER_ENV), getattr(constants, "ENABLE_RAY_CLUSTER", None)
    os.environ[_CLUSTER_ENV] = "0"
    if constants is not None:
        constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        if before_env is None:
            os.environ.pop(_CLUSTER_ENV, None)
        else:
            os.environ[_CLUSTER_ENV] = before_env
        if constants is not None and before is not None:
            constants.ENABLE_RAY_CLUSTER = before


def _on_loopback(address: str) -> bool:
    """Whether a Ray address (``HOST:PORT``, ``ray://HOST:PORT``) names this machine's loopback."""
    host = address.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
    return host in ("127.0.0.1", "localhost", "::1")


def init_local_ray(ray: Any, **kwargs: Any) -> None:
    """``ray.init(**kwargs)`` starting a local instance that listens on 127.0.0.1 only.

    Raises:
        UsageError: Ray still chose another address (it is shut down again).
    """
    with _loopback_node(ray):
        ray.init(_node_ip_address=_LOOPBACK, **kwargs)
    address = ray.get_runtime_context().gcs_address or ""
    if not address.startswith(f"{_LOOPBACK}:"):
        ray.shutdown()
        raise UsageError(f"the local Ray instance would listen on {address}, not on {_LOOPBACK} only; refused "
                         "(start a cluster yourself and give --ray-address)")  # fmt: skip


def run_trial(job: TrialJob, cwd: str) -> tuple[int, float]:
    """The Ray task: run one trial on this worker and return ``(exit status, seconds)``.

    The command is decided here (a retried trial resumes from its checkpoint); the trial
    process holds the trial's lock and dies with this worker. A cancelled task stops it.
    """
    from .local import start_trial, stop_trials

    started = time.perf_counter()
    if threading.current_thread() is threading.main_thread():  # ray.cancel interrupts with SIGINT, which a
        signal.signal(signal.SIGINT, signal.default_int_handler)  # worker started in the background ignores
    fd = _hold_trial_lock(job)
    try:
        if job.fresh and not os.path.exists(job.fresh[0]):  # another Python path on this node
            job = dataclasses.replace(job, fresh=(sys.executable, *job.fresh[1:]),
                                      resume=None if job.resume is None else (sys.executable, *job.resume[1:]))  # fmt: skip
        note = f"ray worker {os.getpid()} on {socket.gethostname()}"
        process = start_trial(job, (fd,), note=note, cwd=cwd if os.path.isdir(cwd) else None)
        try:
            while (code := process.poll()) is None:  # not a blocking wait: ray.cancel's interrupt
                time.sleep(0.1)  # arrives between bytecodes
        except BaseException:  # ray.cancel: the task is interrupted; end the trial with it
            stop_trials([process])
            raise
    finally:
        os.close(fd)  # the trial process's copy kept it held while it ran
    return code, time.perf_counter() - started


class RayExecutor:
    """Trials as Ray tasks (see the module docstring)."""

    def __init__(self, options: ExecutorOptions):
        self.ray = import_extra("ray", "--backend ray", "ray")
        self.settings = ray_settings(options.settings)
        self.threads = max(1, int(self.settings.cpus_per_trial))
        self._owned = False
        self._empty: str | None = None  # the private empty folder ray.init ran from (removed at shutdown)
        if not self.ray.is_initialized():
            self._init(options.workers)
        self.totals = self.ray.cluster_resources()
        self.capacity = options.workers or self._slots()
        self._remote = self.ray.remote(run_trial)
        self._running: dict[Any, tuple[TrialJob, float]] = {}  # object ref → (job, submitted)
        self._refused: list[TrialOutcome] = []  # trials no node of the cluster could ever hold
        self._cwd = os.getcwd()

    def _init(self, workers: int | None) -> None:
        address = self.settings.address
        quiet = {"log_to_driver": False, "configure_logging": False}
        handlers = _signal_handlers()  # ray.init installs its own: SIGTERM would end the sweep unrecorded
        self._empty = tempfile.mkdtemp(prefix="modforge-ray-")  # 0700: nothing importable, nobody else writes
        try:
            with working_directory(self._empty):
                if address:
                    # a cluster on this machine's loopback (as the sweep's own and the tests' are): this driver's
                    # node is 127.0.0.1 too, or Ray would wait for a node at the machine's network address
                    with _loopback_node(self.ray) if _on_loopback(address) else contextlib.nullcontext():
                        self.ray.init(address=address, **quiet)
                else:
                    # every core this process may use (never fewer than the workers need): a trial with --nproc N
                    # asks for N times cpus_per_trial, and --workers, not the instance's size, caps how many run
                    cpus = max(math.ceil((workers or 1) * self.settings.cpus_per_trial), default_threads(1))
                    init_local_ray(self.ray, num_cpus=cpus, include_dashboard=False,
                                   object_store_memory=_OBJECT_STORE_BYTES, **quiet)  # fmt: skip
        except BaseException:
            self._remove_empty()
            raise
        finally:
            _restore(handlers)
        self._owned = True

    def _slots(self) -> int:
        """How many one-process trials the cluster's resources hold at once (at least one)."""
        slots = int(self.totals.get("CPU", 1) // self.settings.cpus_per_trial)
        if self.settings.gpus_per_trial > 0:
            slots = min(slots, int(self.totals.get("GPU", 0) // self.settings.gpus_per_trial))
        return max(1, slots)

    def free(self) -> int:
        return self.capacity - len(self._running) - len(self._refused)

    def running(self) -> int:
        return len(self._running) + len(self._refused)

    def submit(self, job: TrialJob) -> None:
        n = max(1, job.processes)
        cpus, gpus = self.settings.cpus_per_trial * n, self.settings.gpus_per_trial * n
        if cpus > self.totals.get("CPU", 0) or gpus > self.totals.get("GPU", 0):
            have = f"{self.totals.get('CPU', 0):g} CPUs and {self.totals.get('GPU', 0):g} GPUs"
            _note(job, f"error: the trial needs {cpus:g} CPUs and {gpus:g} GPUs ({n} process(es) × cpus_per_trial / "
                  f"gpus_per_trial) but the Ray cluster has {have} in all")  # fmt: skip
            self._refused.append(TrialOutcome(job.trial_id, 1, 0.0))
            return
        task = self._remote.options(num_cpus=cpus, num_gpus=gpus, max_retries=self.settings.max_retries,
                                    retry_exceptions=False)  # fmt: skip
        self._running[task.remote(job, self._cwd)] = (job, time.perf_counter())

    def wait(self, timeout: float) -> list[TrialOutcome]:
        if self._refused:
            refused, self._refused = self._refused, []
            return refused
        if not self._running:
            return []
        ready, _ = self.ray.wait(list(self._running), num_returns=1, timeout=timeout)
        if ready:  # every other one that is ready too
            ready, _ = self.ray.wait(list(self._running), num_returns=len(self._running), timeout=0)
        ended = []
        for ref in ready:
            job, submitted = self._running.pop(ref)
            try:
                code, seconds = self.ray.get(ref)
            except self.ray.exceptions.RayError as exc:  # retries used up, or the task itself failed
                _note(job, f"error: the Ray task failed: {type(exc).__name__}: {str(exc).splitlines()[0]}")
                code, seconds = 1, time.perf_counter() - submitted
            ended.append(TrialOutcome(job.trial_id, code, seconds))
        return ended

    def shutdown(self) -> None:
        for ref in self._running:
            self.ray.cancel(ref)  # interrupts the task, which stops its trial process
        jobs = [job for job, _ in self._running.values()]
        if self._running:
            _, stuck = self.ray.wait(list(self._running), num_returns=len(self._running), timeout=_CANCEL_GRACE_S)
            for ref in stuck:  # only those: force-cancelling a task that has ended upsets Ray
                self.ray.cancel(ref, force=True)  # a task that did not stop: its worker is killed
        self._running.clear()
        for job in jobs:  # the lock is free once the trial's last process has ended
            try:
                os.close(_hold_trial_lock(job, wait_s=_CANCEL_GRACE_S))
            except RuntimeError:
                pass
        if self._owned and self.ray.is_initialized():
            self.ray.shutdown()
            self._owned = False
        self._remove_empty()

    def _remove_empty(self) -> None:
        if self._empty is not None:
            with contextlib.suppress(OSError):
                os.rmdir(self._empty)
            self._empty = None


def _signal_handlers() -> dict[int, Any]:
    """SIGINT's and SIGTERM's handlers now (none off the main thread, where they cannot be set)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}


def _restore(handlers: dict[int, Any]) -> None:
    """Put back what :func:`_signal_handlers` saw: the sweep stops its trials and records them itself."""
    for signum, handler in handlers.items():
        if handler is not None:
            signal.signal(signum, handler)


def _note(job: TrialJob, line: str) -> None:
    """Append ``line`` to the trial's log (where the sweep reads a failed trial's error)."""
    try:
        ensure_folder(job.log.parent)
        with open_append(job.log) as log:
            log.write(line + "\n")
    except (OSError, UsageError):  # a log that cannot be written safely: the outcome is still recorded
        pass


register_executor("ray")(RayExecutor)
