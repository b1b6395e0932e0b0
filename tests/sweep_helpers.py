"""What the sweep tests share: running ``modforge sweep`` in a fresh process, reading ``trials.csv``."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

TIMEOUT_S = 300  # against hangs only


def sweep_cli(cwd: Path, *args: str, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess:
    """``modforge sweep ARGS`` in ``cwd``, its output captured."""
    return subprocess.run([sys.executable, "-m", "modforge", "sweep", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip


def trial_rows(sweep_dir: Path) -> dict[str, dict[str, str]]:
    """``trials.csv`` of ``sweep_dir`` by trial id."""
    with (sweep_dir / "trials.csv").open(newline="") as fh:
        return {row["trial"]: row for row in csv.DictReader(fh)}


def digits_beside(folder: Path) -> Path:
    """A copy of ``configs/digits.yaml`` in ``folder``: a sweep file may only name configs that lie
    beside it (its folder or below), as the tests' sweep files in ``tmp_path`` do with this copy."""
    import shutil

    copy = folder / "digits.yaml"
    shutil.copyfile(Path(__file__).resolve().parents[1] / "configs" / "digits.yaml", copy)
    return copy
