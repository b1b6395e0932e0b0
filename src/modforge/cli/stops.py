"""What a stopped training run kept, and how to continue it.

Ctrl-C (SIGINT) and SIGTERM — a job scheduler's or a sweep's stop, ``kill`` — end a run between
its checkpoints. Saying only ``interrupted`` leaves the user to guess whether anything survived;
:class:`RunStopped` carries the answer instead: the last complete checkpoint (the file, its
epoch, batch and step) and the exact ``modforge train --resume RUN`` command, or that the run
folder holds no checkpoint yet, or that no run folder was made at all. The entry point prints it
(:func:`modforge.cli.main.main`) and exits 130 for SIGINT, 143 for SIGTERM, as shells do.
"""

from __future__ import annotations

import contextlib
import shlex
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

from ..core.config import display_path

__all__ = ["RunStopped", "Terminated", "kept_lines", "sigterm_interrupts", "stopped"]


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process was (as Ctrl-C raises :class:`KeyboardInterrupt`), so a
    run stops through the same clean-up and says what it kept."""

    exit_code = 128 + signal.SIGTERM

    def __init__(self) -> None:
        super().__init__("stopped by SIGTERM")


class RunStopped(KeyboardInterrupt):
    """A run stopped by a signal. ``str()`` is the one-line error; :attr:`details` the lines after it.

    Attributes:
        exit_code: 130 after SIGINT, 143 after SIGTERM (128 + the signal's number).
        details: what was kept and the command that continues the run.
    """

    def __init__(self, message: str, details: list[str], exit_code: int):
        super().__init__(message)
        self.details = details
        self.exit_code = exit_code


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """While inside, SIGTERM raises :class:`Terminated` in the main thread (off it, where no handler
    can be set, nothing changes); the previous handler is put back on the way out — unless one was
    put in place inside (torchrun's processes say a peer failed instead): that one stays, for a
    launcher that signals again while the process is already on its way out."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _raise(signum: int, frame: object) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGTERM) is _raise:
            signal.signal(signal.SIGTERM, previous)


def _position(payload: dict) -> str:
    """Where a checkpoint stands: ``end of epoch 3, step 120`` or ``epoch 4, batch 7, step 127``."""
    epoch, batch, step = (int(payload.get(key, 0)) for key in ("epoch", "batch_in_epoch", "global_step"))
    done = (payload.get("continual") or {}).get("tasks_done")
    task = f"task {int(done) + 1}, " if done is not None else ""
    if batch == 0:
        return f"{task}end of epoch {epoch}, step {step}"
    return f"{task}epoch {epoch + 1}, batch {batch}, step {step}"


def kept_lines(run_dir: Path | None, processes: int = 1) -> list[str]:
    """What ``run_dir`` holds to continue from, and the command that continues it (see the module)."""
    if run_dir is None or not (run_dir / "config.yaml").is_file():
        return ["nothing was kept: the run stopped before its run folder was made"]
    from ..train.checkpoint import CheckpointError, find_resumable

    run = display_path(run_dir)
    command = f"modforge train --resume {shlex.quote(run)}" + (f" --nproc {processes}" if processes > 1 else "")
    directory = run_dir / "checkpoints"
    if not directory.is_dir() or not any(p.suffix == ".pt" for p in directory.iterdir()):
        return [f"{run} holds no checkpoint yet (the run stopped before its first one); to train it again from "
                f"the start: {command}"]  # fmt: skip
    try:
        path, payload = find_resumable(run_dir, using="reporting")
    except CheckpointError as exc:
        return [f"{run} holds no checkpoint that loads ({exc}); to train it again from the start: {command}"]
    return [f"kept: {display_path(path)} ({_position(payload)})", f"to continue: {command}"]


def stopped(exc: KeyboardInterrupt, run_dir: Path | None, processes: int = 1) -> RunStopped:
    """The :class:`RunStopped` for ``exc`` (Ctrl-C or :class:`Terminated`) in a run writing ``run_dir``."""
    if isinstance(exc, Terminated):
        how, code = str(exc), Terminated.exit_code
    else:
        how, code = "interrupted (Ctrl-C)", 130
    return RunStopped(how, kept_lines(run_dir, processes), code)
