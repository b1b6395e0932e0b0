"""Executors: where trials run. The local process pool is built in; others register in
:data:`EXECUTORS` (``--backend NAME``).

The seam is :class:`Executor`: the sweep submits :class:`~.command.TrialJob` s while
:meth:`Executor.free` says there is room, and collects :class:`TrialOutcome` s with
:meth:`Executor.wait`. An executor runs ``job.argv()`` (decided on the machine that runs
the trial: resume from the folder's checkpoint, or start afresh), sends the process's
output to ``job.log``, and makes sure no trial process outlives :meth:`Executor.shutdown`.
Whether a trial succeeded is read from its folder (``summary.json``), not from the
executor, so an executor that retries a trial elsewhere needs no extra bookkeeping.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from ..core.errors import UsageError
from ..core.optional import import_extra
from ..core.safe_files import open_regular
from ..core.threads import available_cpus
from .command import TrialJob
from .factories import adds_to

__all__ = [
    "EXECUTORS",
    "Executor",
    "ExecutorOptions",
    "TrialOutcome",
    "default_threads",
    "import_extra",
    "last_error_line",
    "register_executor",
]


@dataclasses.dataclass(frozen=True)
class TrialOutcome:
    """A trial process that ended.

    Attributes:
        trial_id: the trial's id.
        returncode: the command's exit status (negative: killed by that signal).
        seconds: wall-clock seconds of this attempt.
    """

    trial_id: str
    returncode: int
    seconds: float


@dataclasses.dataclass(frozen=True)
class ExecutorOptions:
    """What the command line gives every executor.

    Attributes:
        workers: trials run at once (``None``: not given; the backend decides — the local
            pool runs one, Ray as many as the cluster's resources hold).
        keep_fds: file descriptors every local trial process must inherit (the sweep folder's
            lock, held until the last process that could write a trial folder has ended).
        settings: the backend's own settings (the sweep file's section of that name, e.g.
            ``ray:``, with the command line's values over it).
    """

    workers: int | None = 1
    keep_fds: tuple[int, ...] = ()
    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def default_threads(workers: int) -> int:
    """Torch threads per trial: the cores this process may use, divided among the workers."""
    return max(1, available_cpus() // max(1, workers))


class Executor(Protocol):
    """Runs trial jobs (see the module docstring)."""

    threads: int
    """The torch threads each trial gets (``train.num_threads``): the CPUs reserved for it."""

    def free(self) -> int:
        """How many more trials can start now."""
        ...

    def running(self) -> int:
        """How many trials are running."""
        ...

    def submit(self, job: TrialJob) -> None:
        """Start ``job`` (only while :meth:`free` is positive)."""
        ...

    def wait(self, timeout: float) -> list[TrialOutcome]:
        """Trials that ended since the last call; waits up to ``timeout`` seconds for one."""
        ...

    def shutdown(self) -> None:
        """Stop every running trial and return once their processes have ended."""
        ...


ExecutorFactory = Callable[[ExecutorOptions], Executor]
EXECUTORS: dict[str, ExecutorFactory] = {}
"""Backend name (``modforge sweep --backend NAME``) → factory ``(options) -> Executor``."""


def register_executor(name: str) -> Callable[[ExecutorFactory], ExecutorFactory]:
    """Register an executor under ``name`` (``--backend NAME``)."""
    return adds_to(EXECUTORS, name)


_NOISE = ("Traceback", "  File ", "During handling", "The above exception", "warning:", "[W ", "[I ")


def last_error_line(log: Path, limit: int = 300) -> str:
    """The trial's error in one line: the last ``error:`` line of its log (modforge prints
    one), else its last meaningful line; shortened to ``limit`` characters."""
    try:
        with open_regular(log, "rb") as fh:  # never through a link, never a FIFO that would hang the read
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - 65536))
            lines = fh.read().decode("utf-8", "replace").splitlines()
    except (OSError, UsageError):
        return "no log"
    lines = [line.strip() for line in lines if line.strip()]
    headers = [i for i, line in enumerate(lines) if line.startswith("# ")]  # each attempt starts with one
    if headers:
        lines = lines[headers[-1] + 1 :]  # this attempt's output, not an earlier attempt's error
    chosen = next((line for line in reversed(lines) if line.startswith("error:")), None)
    if chosen is None:
        chosen = next((line for line in reversed(lines) if not line.startswith(_NOISE)), "no output")
    chosen = chosen.removeprefix("error:").strip()
    return chosen if len(chosen) <= limit else chosen[: limit - 1] + "…"
