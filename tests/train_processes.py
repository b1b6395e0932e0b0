"""Training in child processes for the kill-and-resume tests: start `modforge train`, and kill
it with SIGKILL at chosen moments, resuming each time, until it finishes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def start_training(args: list[str], cwd: Path) -> subprocess.Popen:
    """``modforge train ARGS`` in a child process (stderr kept for the failure message)."""
    return subprocess.Popen([sys.executable, "-m", "modforge", "train", *args], cwd=cwd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def kill_and_resume(args: list[str], run: Path, delays: tuple[float, ...], cwd: Path) -> int:
    """Start training into ``run``; once it has a checkpoint, wait each of ``delays`` and
    SIGKILL it, resuming after every kill; wait for the last process to succeed. Returns
    how many times it was killed."""
    proc = start_training([*args, "--run-dir", str(run)], cwd)
    kills = 0
    for delay in delays:
        while not (run / "checkpoints" / "last.pt").exists() and proc.poll() is None:
            time.sleep(0.01)
        time.sleep(delay)
        if proc.poll() is not None:
            break
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        kills += 1
        proc = start_training(["--resume", str(run)], cwd)
    assert proc.wait(timeout=300) == 0, proc.stderr.read()
    return kills
