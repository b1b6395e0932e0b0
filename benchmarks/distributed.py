"""Distributed overhead: modforge's Trainer in 2 processes (DDP over gloo) vs a hand-written
PyTorch DDP loop in the same 2 processes.

Setup (the same for both): scikit-learn digits as 64-feature vectors, an MLP 64→256→256→10,
batch 32 per process, SGD (lr 0.05), 10 epochs, one thread per process, torchrun
``--standalone --nproc-per-node 2``. The hand-written loop is what the PyTorch tutorial
does: ``DistributedSampler`` + ``DataLoader`` + ``DistributedDataParallel``, with
``set_epoch`` each epoch. The Trainer runs with its progress bar and CSV logging ON and
combines the epoch's loss over the processes; a second Trainer row adds a checkpoint every
epoch (every process's RNG state and losses are gathered, rank 0 serializes and writes
while the others wait at the next step) — its extra time per save is reported.

Method: paired runs, as ``trainer_overhead.py``. Each launch starts two fresh processes that
train every contender for one untimed epoch, then time 10 epochs of freshly built models in
the order loop, trainer, trainer+checkpoints, trainer+checkpoints, trainer, loop; a
contender's time is rank 0's wall time between two barriers. A launch's ratio is contender
/ loop within it; the figures are medians over launches. Model and data construction are
excluded.

    python benchmarks/distributed.py [--runs 5] [--write]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

EPOCHS, BATCH, LR, SEED, PROCESSES = 10, 32, 0.05, 0, 2
TARGET = 1.05


def _data():
    import modforge as mf

    return mf.DATASETS.build({"type": "digits", "args": {"as_image": False}}, seed=SEED).train


def run_loop(epochs: int) -> float:
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    train = _data()
    torch.manual_seed(SEED)
    model = DistributedDataParallel(
        nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    )
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    dataset = TensorDataset(train.inputs, train.labels)
    sampler = DistributedSampler(dataset, shuffle=True, seed=SEED)
    loader = DataLoader(dataset, batch_size=BATCH, sampler=sampler)
    dist.barrier()
    start = time.perf_counter()
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
    dist.barrier()
    return time.perf_counter() - start


def run_trainer(epochs: int, run_dir: str, checkpoints: bool = True) -> float:
    import torch
    import torch.distributed as dist

    import modforge as mf
    from modforge.data import LoaderSettings, make_loader
    from modforge.train.trainer import Trainer

    train = _data()
    torch.manual_seed(SEED)
    model = mf.build_model(
        {"backbone": {"type": "mlp", "args": {"hidden_dims": [256, 256]}}, "head": "linear", "losses": ["cross_entropy"]},
        in_dim=64,
        num_classes=10,
    )
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    loader = make_loader(train, LoaderSettings(batch_size=BATCH), train=True,
                         generator=torch.Generator().manual_seed(SEED),
                         num_replicas=dist.get_world_size(), rank=dist.get_rank())  # fmt: skip
    callbacks = [
        mf.CALLBACKS.build({"type": "progress", "args": {"bar": "always"}}),
        mf.CALLBACKS.build("csv_logger"),
        mf.CALLBACKS.build({"type": "checkpoint", "args": {"every_n_epochs": 1 if checkpoints else 0}}),
    ]
    trainer = Trainer(model, opt, callbacks=callbacks, max_epochs=epochs, run_dir=run_dir)
    dist.barrier()
    start = time.perf_counter()
    trainer.fit(loader)
    dist.barrier()
    return time.perf_counter() - start


def _child(out: str) -> None:
    """One process of a launch: warm up, then time the contenders in a palindromic order."""
    import torch

    from modforge.train import distributed

    torch.set_num_threads(1)
    distributed.setup()
    dirs: list[tempfile.TemporaryDirectory] = []

    def run(mode: str, epochs: int = EPOCHS) -> float:
        if mode == "loop":
            return run_loop(epochs)
        dirs.append(tempfile.TemporaryDirectory())
        return run_trainer(epochs, dirs[-1].name, checkpoints=mode == "checkpoints")

    modes = ("loop", "trainer", "checkpoints")
    try:
        for mode in modes:
            run(mode, 1)
        times: dict[str, list[float]] = {mode: [] for mode in modes}
        for mode in (*modes, *reversed(modes)):
            times[mode].append(run(mode))
    finally:
        for d in dirs:
            d.cleanup()
    if distributed.is_main_process():
        Path(out).write_text(json.dumps(times))
    distributed.shutdown()


def _launch() -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "times.json"
        subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={PROCESSES}",
             __file__, "--child", str(out)],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**__import__("os").environ, "OMP_NUM_THREADS": "1"},
        )  # fmt: skip
        return json.loads(out.read_text())


def main() -> int:
    from _report import paired_run_arguments

    ns = paired_run_arguments(__doc__, "launches of two processes")
    if ns.child:
        _child(ns.child)
        return 0
    from _report import publish

    _launch()  # warm-up: file caches
    ratios: dict[str, list[float]] = {"trainer": [], "checkpoints": []}
    times_all: dict[str, list[float]] = {"loop": [], "trainer": [], "checkpoints": []}
    save_ms = []
    for _ in range(ns.runs):
        times = _launch()
        loop = statistics.median(times["loop"])
        for mode in ratios:
            ratios[mode].append(statistics.median(times[mode]) / loop)
        for mode in times_all:
            times_all[mode] += times[mode]
        save_ms.append(1e3 * (statistics.median(times["checkpoints"]) - statistics.median(times["trainer"])) / EPOCHS)
    ratio = statistics.median(ratios["trainer"])
    verdict = "meets" if ratio <= TARGET else "misses"
    median = statistics.median
    table = "\n".join([
        f"| contender ({PROCESSES} processes, gloo) | median train time (s) | median paired ratio vs loop | timed runs |",
        "|---|---|---|---|",
        f"| hand-written DDP loop (DistributedSampler) | {median(times_all['loop']):.3f} | 1.000× | "
        f"{len(times_all['loop'])} |",
        f"| modforge Trainer (progress bar, CSV) | {median(times_all['trainer']):.3f} | {ratio:.3f}× | "
        f"{len(times_all['trainer'])} |",
        f"| modforge Trainer + a checkpoint every epoch | {median(times_all['checkpoints']):.3f} | "
        f"{median(ratios['checkpoints']):.3f}× | {len(times_all['checkpoints'])} |",
        "",
        f"**Trainer / hand-written DDP loop: {ratio:.3f}×** ({verdict} the ≤ {TARGET:.2f}× target; per-launch "
        f"ratios: {', '.join(f'{r:.3f}' for r in sorted(ratios['trainer']))}). A checkpoint costs "
        f"{median(save_ms):.1f} ms of every process's time (epochs here take "
        f"{1e3 * median(times_all['loop']) / EPOCHS:.0f} ms).",
    ])  # fmt: skip
    return publish("distributed", table, ns.write)


if __name__ == "__main__":
    sys.exit(main())
