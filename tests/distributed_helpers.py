"""Helpers of the multi-process tests: launching torchrun / modforge, finding a rank's process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

WORKER = Path(__file__).with_name("distributed_worker.py")
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}

DIGITS = """
seed: 0
data: {type: digits, args: {as_image: false}, batch_size: 16}
model:
  backbone: {type: mlp, args: {hidden_dims: [32], dropout: 0.1}}
  head: linear
  losses: [cross_entropy]
train:
  max_epochs: 2
  optimizer: {type: sgd, args: {lr: 0.1, momentum: 0.9}}
  metrics: [accuracy, loss, macro_f1]
  checkpoint: {every_n_steps: 10, keep_last: 50}
  ema: {decay: 0.9}   # the weight average under several processes: evaluated, checkpointed, resumed
  num_threads: 1
  progress: never
  distributed: {timeout: 60}
"""


def torchrun(nproc: int, *args: str, cwd: Path, wait: bool = True) -> subprocess.Popen | subprocess.CompletedProcess:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *args]
    if wait:
        return subprocess.run(command, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=300)
    return subprocess.Popen(command, cwd=cwd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def modforge(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "modforge", *args], cwd=cwd, env=ENV, capture_output=True,
                          text=True, timeout=300)


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found += [int(entry.name), *children(int(entry.name))]
    return found


def rank_pid(launcher: int, rank: int) -> int | None:
    for pid in children(launcher):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in environ and b"LOCAL_RANK=" + str(rank).encode() in environ:
            return pid
    return None


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
