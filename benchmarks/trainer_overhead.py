"""Trainer overhead: modforge's Trainer vs a hand-written PyTorch loop (and Lightning, if installed).

Setup (the same for every contender): scikit-learn digits as 64-feature vectors, an MLP
64→256→256→10, batch 32, SGD (lr 0.05), 10 epochs, one thread. The Trainer runs with its
progress bar, CSV logging and a checkpoint every epoch ON; Lightning (when installed)
with every extra OFF.

Method: paired runs. Each run is a fresh process that first trains the hand-written loop
and the contender for one untimed epoch each (one-off costs — lazy imports, which this
environment compiles from source every time, the allocator's first requests — are not
billed), then times 10 epochs of freshly built models in the order loop, contender,
contender, loop, twice. Its ratio is contender time / loop time within that process, so what
differs between processes (memory layout, which CPU it lands on, a noisy neighbour on
the host) cancels out; the figure is the median of those ratios over the runs. Model and
data construction are excluded from the timings.

    python benchmarks/trainer_overhead.py [--runs 5] [--write]
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _timing import child_result  # noqa: E402

EPOCHS, BATCH, LR, SEED = 10, 32, 0.05, 0
TARGET = 1.05


def _data():
    import modforge as mf

    splits = mf.DATASETS.build({"type": "digits", "args": {"as_image": False}}, seed=SEED)
    return splits.train


def _mlp():
    import torch.nn as nn

    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))


def run_loop(epochs: int = EPOCHS) -> float:
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset

    train = _data()
    torch.manual_seed(SEED)
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    loader = DataLoader(
        TensorDataset(train.inputs, train.labels),
        batch_size=BATCH,
        shuffle=True,
        generator=torch.Generator().manual_seed(SEED),
    )
    start = time.perf_counter()
    for _ in range(epochs):
        for x, y in loader:
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
    return time.perf_counter() - start


def run_trainer(run_dir: str, epochs: int = EPOCHS) -> float:
    import torch

    import modforge as mf
    from modforge.data import LoaderSettings, make_loader
    from modforge.train.trainer import Trainer

    train = _data()
    torch.manual_seed(SEED)
    model = mf.build_model(
        {
            "backbone": {"type": "mlp", "args": {"hidden_dims": [256, 256]}},
            "head": "linear",
            "losses": ["cross_entropy"],
        },
        in_dim=64,
        num_classes=10,
    )
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    loader = make_loader(
        train, LoaderSettings(batch_size=BATCH), train=True, generator=torch.Generator().manual_seed(SEED)
    )
    callbacks = [
        mf.CALLBACKS.build({"type": "progress", "args": {"bar": "always"}}),
        mf.CALLBACKS.build("csv_logger"),
        mf.CALLBACKS.build({"type": "checkpoint", "args": {"every_n_epochs": 1}}),
    ]
    trainer = Trainer(model, opt, callbacks=callbacks, max_epochs=epochs, run_dir=run_dir)
    start = time.perf_counter()
    trainer.fit(loader)
    return time.perf_counter() - start


def run_lightning(epochs: int = EPOCHS) -> float:
    import lightning as L
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = _mlp()

        def training_step(self, batch, _):
            x, y = batch
            return F.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=LR)

    train = _data()
    torch.manual_seed(SEED)
    module = Module()
    loader = DataLoader(
        TensorDataset(train.inputs, train.labels),
        batch_size=BATCH,
        shuffle=True,
        generator=torch.Generator().manual_seed(SEED),
    )
    trainer = L.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    start = time.perf_counter()
    trainer.fit(module, loader)
    return time.perf_counter() - start


def _child(contender: str) -> None:
    """One process: warm up, then time the hand-written loop and ``contender`` in the order
    loop, contender, contender, loop, twice (so drift within the process cancels out)."""
    import torch

    torch.set_num_threads(1)
    dirs: list[tempfile.TemporaryDirectory] = []

    def run(mode: str, epochs: int = EPOCHS) -> float:
        if mode == "trainer":
            dirs.append(tempfile.TemporaryDirectory())
            return run_trainer(dirs[-1].name, epochs=epochs)
        return {"loop": run_loop, "lightning": run_lightning}[mode](epochs=epochs)

    try:
        run("loop", 1)
        run(contender, 1)
        times = {"loop": [], contender: []}
        for mode in ("loop", contender, contender, "loop") * 2:
            times[mode].append(run(mode))
    finally:
        for d in dirs:
            d.cleanup()
    print(json.dumps(times))


def _measure(contender: str) -> dict[str, list[float]]:
    return child_result(__file__, "--child", contender)


def main() -> int:
    from _report import paired_run_arguments

    ns = paired_run_arguments(__doc__, "processes per contender")
    if ns.child:
        _child(ns.child)
        return 0
    contenders = ["trainer"]
    try:
        import lightning  # noqa: F401

        contenders.append("lightning")
    except ImportError:
        pass
    for contender in contenders:  # warm-up: file caches
        _measure(contender)
    ratios: dict[str, list[float]] = {c: [] for c in contenders}
    times: dict[str, list[float]] = {c: [] for c in ["loop", *contenders]}
    for _ in range(ns.runs):
        for contender in contenders:
            pair = _measure(contender)
            ratios[contender].append(statistics.mean(pair[contender]) / statistics.mean(pair["loop"]))
            times["loop"] += pair["loop"]
            times[contender] += pair[contender]
    names = {
        "loop": "hand-written loop",
        "trainer": "modforge Trainer (progress bar, CSV, checkpoint/epoch ON)",
        "lightning": "Lightning (every extra OFF)",
    }
    lines = [
        "| contender | median train time (s) | median paired ratio vs loop | timed runs |",
        "|---|---|---|---|",
        f"| {names['loop']} | {statistics.median(times['loop']):.3f} | 1.000× | {len(times['loop'])} |",
    ]
    for contender in contenders:
        ratio = statistics.median(ratios[contender])
        med = statistics.median(times[contender])
        lines.append(f"| {names[contender]} | {med:.3f} | {ratio:.3f}× | {len(times[contender])} |")
    ratio = statistics.median(ratios["trainer"])
    spread = ", ".join(f"{r:.3f}" for r in sorted(ratios["trainer"]))
    verdict = "meets" if ratio <= TARGET else "misses"
    table = (
        "\n".join(lines)
        + f"\n\n**Trainer / hand-written loop: {ratio:.3f}×** ({verdict} the ≤ {TARGET}× target; "
        + f"per-process ratios: {spread})\n"
    )
    if "lightning" not in contenders:
        table += "\nLightning is not installed (`pip install -e '.[bench]'` adds it to this comparison).\n"
    from _report import publish

    return publish("trainer_overhead", table, ns.write)


if __name__ == "__main__":
    sys.exit(main())
