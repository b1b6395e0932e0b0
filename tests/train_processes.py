"""Training in child processes for the kill-and-resume tests: start `modforge train`, and kill
it with SIGKILL at chosen moments, resuming each time, until it finishes."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

HANG_S = 300  # against a hang only


def start_training(args: list[str], cwd: Path) -> subprocess.Popen:
    """``modforge train ARGS`` in a child process (stderr kept for the failure message)."""
    return subprocess.Popen([sys.executable, "-m", "modforge", "train", *args], cwd=cwd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def kill_when(args: list[str], run: Path, moments: Iterable[tuple[Callable[[], bool], float]], cwd: Path) -> int:
    """Train into ``run``; for each ``(ready, pause)`` wait until ``ready()`` holds, ``pause`` seconds
    more, and SIGKILL the process, then ``--resume`` it; wait for the last process to succeed. A
    process that finishes first ends the killing. Returns how many times it was killed."""
    proc = start_training([*args, "--run-dir", str(run)], cwd)
    kills = 0
    for ready, pause in moments:
        deadline = time.monotonic() + HANG_S
        while not ready() and proc.poll() is None:
            assert time.monotonic() < deadline, "the run made no progress"
            time.sleep(0.005)
        time.sleep(pause)
        if proc.poll() is not None:
            break
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        kills += 1
        proc = start_training(["--resume", str(run)], cwd)
    assert proc.wait(timeout=HANG_S) == 0, proc.stderr.read()
    return kills


def kill_and_resume(args: list[str], run: Path, delays: tuple[float, ...], cwd: Path) -> int:
    """Start training into ``run``; once it has a checkpoint, wait each of ``delays`` and
    SIGKILL it, resuming after every kill; wait for the last process to succeed. Returns
    how many times it was killed."""
    last = run / "checkpoints" / "last.pt"
    return kill_when(args, run, ((last.exists, delay) for delay in delays), cwd)


def newest_step(run: Path) -> int:
    """The highest optimizer step among the run's complete periodic checkpoints (-1: none yet)."""
    steps = [int(m.group(1)) for p in (run / "checkpoints").glob("epoch*-step*.pt")
             if (m := re.fullmatch(r"epoch\d+-step(\d+)\.pt", p.name))]  # fmt: skip
    return max(steps, default=-1)


def kill_at_steps(args: list[str], run: Path, moments: tuple[tuple[int, float], ...], cwd: Path) -> int:
    """:func:`kill_when` each ``(step, pause)``: once the step's checkpoint exists and ``pause``
    seconds more (mid-step, mid-save or mid-validation). Unlike :func:`kill_and_resume`, each kill waits
    for progress of the resumed process itself, so no kill lands while the interpreter is still importing."""
    return kill_when(args, run, ((lambda step=step: newest_step(run) >= step, pause) for step, pause in moments), cwd)
