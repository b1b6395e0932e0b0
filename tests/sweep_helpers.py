"""What the sweep tests share: running ``modforge sweep`` in a fresh process, reading ``trials.csv``,
the digits config copied beside a test's sweep files (conftest's ``sweep_digits`` fixture uses it),
and a tiny config for the real sweeps whose trials only need to train."""

from __future__ import annotations

import csv
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from run_configs import ADAM, flat_digits, mlp, run_config

TIMEOUT_S = 300  # against hangs only


def sweep_cli(cwd: Path, *args: str, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess:
    """``modforge sweep ARGS`` in ``cwd``, its output captured."""
    return subprocess.run([sys.executable, "-m", "modforge", "sweep", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip


@contextmanager
def running_sweep(cwd: Path, *args: str) -> Iterator[subprocess.Popen]:
    """``modforge sweep ARGS`` started in ``cwd``, its stdout and stderr together in ``stdout`` (text);
    killed on the way out if it still runs (a failed test leaves no sweep behind)."""
    process = subprocess.Popen([sys.executable, "-m", "modforge", "sweep", *args], cwd=cwd, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()  # type: ignore[union-attr]


def wait_for(ready: Callable[[], bool], process: subprocess.Popen, what: str, poll_s: float = 0.01) -> None:
    """Return once ``ready()``; the sweep ``process`` ending first, or ``TIMEOUT_S`` passing, fails the test
    naming ``what`` it waited for."""
    deadline = time.monotonic() + TIMEOUT_S
    while not ready():
        if process.poll() is not None:
            raise AssertionError(f"the sweep ended before {what}: {process.stdout.read()}")  # type: ignore[union-attr]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(poll_s)


def trial_rows(sweep_dir: Path) -> dict[str, dict[str, str]]:
    """``trials.csv`` of ``sweep_dir`` by trial id."""
    with (sweep_dir / "trials.csv").open(newline="") as fh:
        return {row["trial"]: row for row in csv.DictReader(fh)}


SHIPPED_DIGITS = Path(__file__).resolve().parents[1] / "configs" / "digits.yaml"


def digits_beside(folder: Path) -> Path:
    """A copy of ``configs/digits.yaml`` in ``folder``: a sweep file may only name configs that lie
    beside it (its folder or below), as the tests' sweep files in ``tmp_path`` do with this copy."""
    import shutil

    copy = folder / "digits.yaml"
    shutil.copyfile(SHIPPED_DIGITS, copy)
    return copy


# A trial that only needs to train: an MLP on the digits as vectors (79 steps of 16 an epoch, a
# fraction of a second each on one thread), no callbacks. The real sweeps test the sweep's bookkeeping
# (rows, resume, kill, pruning), which holds at any size; each trial still pays its child process's
# imports, so its training is kept small.
TINY_CONFIG = run_config(flat_digits(batch_size=16), mlp(32), train=dict(
    max_epochs=1, optimizer=ADAM, metrics="[accuracy, loss]", monitor="val_accuracy", num_threads=1, progress="never"))  # fmt: skip


def tiny_beside(folder: Path) -> Path:
    """:data:`TINY_CONFIG` written as ``folder/tiny.yaml``, beside the sweep files that name it."""
    path = folder / "tiny.yaml"
    path.write_text(TINY_CONFIG)
    return path
