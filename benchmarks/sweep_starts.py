"""Warm trial starts: a local sweep whose trials are forked from one server that imported torch and
modforge once, against the same sweep with ``--cold-trials`` (every trial a fresh
``python -m modforge train``, which is what a sweep, or a shell loop over ``modforge train``, would
otherwise run).

The sweep: ``--trials`` short trials (an MLP on the digits as vectors, one epoch, one thread each),
``--workers 2``. Both ways run interleaved, ``--runs`` times each after a warm-up; the medians of
wall time and of CPU time (the sweep and every process under it) are compared. Target: warm needs
at most half the CPU of cold for 8 trials (a cold trial's start-up is most of a short trial).

    python benchmarks/sweep_starts.py [--runs 3] [--trials 8] [--write]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _report import median, publish  # noqa: E402

TARGET = 0.5
CONFIG = """seed: 0
data: {type: digits, args: {as_image: false}, batch_size: 16}
model:
  backbone: {type: mlp, args: {hidden_dims: [32]}}
  head: linear
  losses: [cross_entropy]
train:
  max_epochs: 1
  optimizer: {type: adam, args: {lr: 0.01}}
  metrics: [accuracy, loss]
  num_threads: 1
  progress: never
"""


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _sweep(folder: Path, cold: bool) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one sweep into a new sweep folder."""
    target = folder / ("cold" if cold else "warm")
    shutil.rmtree(target, ignore_errors=True)
    command = [sys.executable, "-m", "modforge", "sweep", "sweep.yaml", "--workers", "2", "--sweep-dir", str(target)]
    cpu, start = _children_cpu(), time.perf_counter()
    subprocess.run([*command, *(["--cold-trials"] if cold else [])], cwd=folder, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    return time.perf_counter() - start, _children_cpu() - cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--write", action="store_true", help="record the figures in benchmarks/README.md")
    ns = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mf-sweep-starts-") as tmp:
        folder = Path(tmp)
        (folder / "tiny.yaml").write_text(CONFIG)
        seeds = ", ".join(str(seed) for seed in range(ns.trials))
        (folder / "sweep.yaml").write_text(f"config: tiny.yaml\nseeds: [{seeds}]\ncollect: [test.accuracy]\n")
        for cold in (False, True):  # warm-up: the page cache, both ways
            _sweep(folder, cold)
        figures: dict[str, list[tuple[float, float]]] = {"warm (default)": [], "--cold-trials": []}
        for _ in range(ns.runs):
            figures["warm (default)"].append(_sweep(folder, cold=False))
            figures["--cold-trials"].append(_sweep(folder, cold=True))
    wall = {name: median([w for w, _ in runs]) for name, runs in figures.items()}
    cpu = {name: median([c for _, c in runs]) for name, runs in figures.items()}
    ratio = cpu["warm (default)"] / cpu["--cold-trials"]
    verdict = "meets" if ratio <= TARGET else "misses"
    table = (
        f"A sweep of {ns.trials} one-epoch digits trials, `--workers 2`; medians of {ns.runs} interleaved runs.\n\n"
        "| trials start | wall (s) | CPU (s) | CPU per trial (s) |\n|---|---|---|---|\n"
        + "".join(f"| {name} | {wall[name]:.1f} | {cpu[name]:.1f} | {cpu[name] / ns.trials:.2f} |\n" for name in figures)
        + f"\n**CPU warm / cold: {ratio:.2f}×**, wall {wall['warm (default)'] / wall['--cold-trials']:.2f}× "
        f"({verdict} the ≤ {TARGET}× CPU target)\n"
    )
    return publish("sweep-starts", table, ns.write)


if __name__ == "__main__":
    sys.exit(main())
