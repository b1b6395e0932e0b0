"""DER++ on an accelerator: modforge's ``derpp`` against Mammoth's own ``Derpp`` (aimagelab/mammoth at the
commit ``benchmarks/continual_mammoth.py`` records), training steps/s on the same stream and device.

The stream is the parity benchmark's: modforge's Seq-Digits of ``configs/continual/base.yaml`` (seed 0; 5
tasks × 2 classes, 64-value vectors; its sha256 is printed), trained for 5 epochs a task in batches of 10, a
replay minibatch of 10, a buffer of 200, α 0.1, β 0.5, SGD at 0.05 — the ``derpp a0.1 b0.5`` run of
``continual_mammoth.json``. Both sides get the very same batches in the same order (each task's epochs
shuffled by a generator seeded from the task and epoch), as CPU tensors (pinned on a GPU), and copy them to
the device themselves:

* **Mammoth**, as its ``utils/main.py`` and ``utils/training.py`` drive it (built by
  ``continual_mammoth.mammoth_kit``): ``meta_begin_task``, then per batch the copies ``train_single_epoch``
  makes (inputs, labels, not-augmented inputs) and ``meta_observe``, ``meta_begin_epoch`` /
  ``meta_end_epoch`` around each epoch, ``meta_end_task``. Its ``Buffer`` keeps its samples on the CPU (its
  default device; ``Derpp`` builds it so) and returns replayed ones to the model's device.
* **modforge**: the ``mlp`` + ``linear`` model of ``base.yaml`` (Xavier weights, zero biases) trained by a
  ``ContinualTrainer`` with ``derpp`` (its buffer on the model's device), ``begin_task`` / ``fit`` for the
  task's epochs / ``end_task``.

Timed: the training of the whole stream (models, optimizers and batches built before the clock starts;
no evaluation on either side), ending with a device synchronisation. One untimed run each first (CUDA and
cuBLAS start-up), then ``--runs`` runs each, alternating (A B B A …); steps/s = steps / the median. Goal:
modforge ≥ 1.00× Mammoth's steps/s.

Mammoth's tree (no network on a device machine: it travels with the working tree, as an ignored folder
named in ``carry``) and its one requirement missing there (kornia) are prepared by
``benchmarks/device_check.py --prepare``; anywhere else::

    git -C <a clone of aimagelab/mammoth> archive e75a491c69fd729edeb01431afb753d9157d9a81 | tar -x -C .mammoth
    python benchmarks/continual_gpu.py [--mammoth .mammoth] [--device cuda] [--runs 5 | --quick] [--write]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

SEED, ALPHA, BETA = 0, 0.1, 0.5
MODEL = {  # configs/continual/base.yaml's model
    "backbone": {"type": "mlp", "args": {"hidden_dims": [100, 100], "weight_init": "xavier_uniform"}},
    "head": {"type": "linear", "args": {"weight_init": "xavier_uniform"}},
    "losses": ["cross_entropy"],
}
TARGET = 1.00


def epoch_batches(inputs, labels, task: int, epochs: int, batch: int, pin: bool) -> list[list[tuple]]:
    """Each epoch's batches of one task, ``(input, label)`` CPU tensors in an order seeded by task and epoch."""
    import torch

    out = []
    for epoch in range(epochs):
        order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(SEED * 1000 + task * 10 + epoch))
        rows = [order[i : i + batch] for i in range(0, len(order), batch)]
        pairs = [(inputs[r].contiguous(), labels[r].contiguous()) for r in rows]
        out.append([(x.pin_memory(), y.pin_memory()) for x, y in pairs] if pin else pairs)
    return out


def sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def mammoth_run(kit, tasks: list, batches: list, device) -> tuple:
    """A callable training Mammoth's ``Derpp`` on the stream (built now, untimed); it returns the steps
    taken and the samples its buffer saw."""
    import torch
    from continual_mammoth import MINIBATCH

    model, dataset, args = kit.build("derpp", {"alpha": ALPHA, "beta": BETA}, SEED, tasks, device=str(device))
    assert args.minibatch_size == MINIBATCH

    def run() -> tuple[int, int]:
        steps = 0
        for t in range(len(tasks)):  # utils/training.py's train(), without its evaluation
            model.net.train()
            dataset.c_task = t  # the dataset's task counter (get_data_loaders' loaders are not used)
            model.meta_begin_task(dataset)
            for epoch, pairs in enumerate(batches[t]):
                model.meta_begin_epoch(epoch, dataset)
                for x, y in pairs:  # train_single_epoch's copies, then observe
                    inputs, labels = x.to(device), y.to(device, dtype=torch.long)
                    not_aug_inputs = x.to(device)
                    model.meta_observe(inputs, labels, not_aug_inputs, epoch=epoch)
                    steps += 1
                model.meta_end_epoch(epoch, dataset)
            model.meta_end_task(dataset)
        sync(device)
        return steps, model.buffer.num_seen_examples

    return run


def modforge_run(tasks: list, batches: list, device) -> tuple:
    """A callable training modforge's ``derpp`` on the stream (built now, untimed); it returns the steps
    taken and the samples its buffer saw."""
    import torch
    from continual_mammoth import BUFFER, CLASSES_PER_TASK, FEATURES, LR, MINIBATCH, NUM_CLASSES

    import modforge as mf
    from modforge.continual.trainer import ContinualTrainer

    torch.manual_seed(SEED)
    model = mf.build_model(MODEL, in_dim=FEATURES, num_classes=NUM_CLASSES)
    args = {"alpha": ALPHA, "beta": BETA, "buffer_size": BUFFER, "minibatch_size": MINIBATCH, "seed": SEED}
    algorithm = mf.ALGORITHMS.build({"type": "derpp", "args": args}, path="algorithm", model=model,
                                    num_classes=NUM_CLASSES)  # fmt: skip
    trainer = ContinualTrainer(model, torch.optim.SGD(model.parameters(), lr=LR), algorithm=algorithm, device=device,
                               async_checkpoints=False)  # fmt: skip
    loaders = [Epochs([[{"input": x, "label": y} for x, y in pairs] for pairs in task]) for task in batches]

    def run() -> tuple[int, int]:
        for t, loader in enumerate(loaders):
            algorithm.begin_task(t, trainer, [CLASSES_PER_TASK * t + c for c in range(CLASSES_PER_TASK)])
            trainer.max_epochs = trainer.epoch + len(loader.epochs)
            trainer.fit(loader)
            algorithm.end_task(t, trainer)
        sync(trainer.device)
        return trainer.global_step, algorithm.buffer.seen

    return run


class Epochs:
    """A loader that serves the next of its epochs' batch lists each time it is iterated."""

    def __init__(self, epochs: list[list[dict]]):
        self.epochs, self.served = epochs, 0

    def __len__(self) -> int:
        return len(self.epochs[self.served % len(self.epochs)])

    def __iter__(self):
        batches = self.epochs[self.served % len(self.epochs)]
        self.served += 1
        return iter(batches)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mammoth", default=str(HERE.parent / ".mammoth"), help="Mammoth's tree (default .mammoth)")
    parser.add_argument("--device", default=None, help="cuda when there is one, else cpu")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="3 runs each (benchmarks/device_check.py)")
    parser.add_argument("--write", action="store_true", help="record the figures in benchmarks/README.md")
    ns = parser.parse_args()
    mammoth = Path(ns.mammoth).resolve()
    if not (mammoth / "models" / "derpp.py").is_file():
        print(f"no Mammoth tree at {mammoth}: export aimagelab/mammoth there (see this script's help), "
              "or run benchmarks/device_check.py --prepare")  # fmt: skip
        return 2
    import torch
    from continual_mammoth import BATCH, EPOCHS, MAMMOTH_COMMIT, mammoth_commit, mammoth_kit, modforge_streams

    device = torch.device(ns.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cpu":
        torch.set_num_threads(1)  # as the parity benchmark runs (tiny matrices: more threads only wait)
    runs = 3 if ns.quick else max(1, ns.runs)
    stream = modforge_streams([SEED])[SEED]  # before Mammoth's top-level packages are importable
    tasks = stream["tasks"]
    kit = mammoth_kit(mammoth)
    batches = [
        epoch_batches(*task["train"], t, EPOCHS, BATCH, pin=device.type == "cuda") for t, task in enumerate(tasks)
    ]
    builders = {"Mammoth": lambda: mammoth_run(kit, tasks, batches, device),
                "modforge": lambda: modforge_run(tasks, batches, device)}  # fmt: skip
    seconds: dict[str, list[float]] = {name: [] for name in builders}
    done: dict[str, tuple[int, int]] = {}
    for build in builders.values():  # untimed: CUDA, cuBLAS and the allocator start up
        build()()
    for r in range(runs):
        for name in list(builders) if r % 2 == 0 else list(builders)[::-1]:
            run = build_and_sync(builders[name], device)
            start = time.perf_counter()
            done[name] = run()
            seconds[name].append(time.perf_counter() - start)
    if done["Mammoth"] != done["modforge"]:
        print(f"the two did different work: (steps, samples offered to the buffer) {done}")
        return 1
    steps = done["modforge"][0]
    rate = {name: steps / statistics.median(values) for name, values in seconds.items()}
    found = mammoth_commit(mammoth, None)
    where = describe(device)
    table = (
        f"{where}; {date.today().isoformat()}. DER++ (α {ALPHA}, β {BETA}, buffer 200, minibatch 10, SGD 0.05, "
        f"batch {BATCH}, {EPOCHS} epochs a task) on the parity stream (Seq-Digits of configs/continual/base.yaml, "
        f"seed {SEED}, sha256 {stream['sha256'][:12]}…), {steps} steps, the same batches for both; training only, "
        f"medians of {runs} runs after a warm-up, alternating. Mammoth at {found[:7]}"
        f"{'' if found == MAMMOTH_COMMIT else ' (not the commit the parity benchmark records)'}.\n\n"
        "| contender | steps/s | seconds (median) |\n|---|---|---|\n"
        + "\n".join(f"| {name} | {rate[name]:,.0f} | {statistics.median(seconds[name]):.2f} |" for name in builders)
        + f"\n\nmodforge / Mammoth: **{rate['modforge'] / rate['Mammoth']:.2f}×** (goal ≥ {TARGET:.2f}×).\n"
    )
    from _report import publish

    return publish("continual_gpu", table, ns.write)


def build_and_sync(build, device):
    """A fresh run's callable, with the device idle before the clock starts."""
    run = build()
    sync(device)
    return run


def describe(device) -> str:
    """The device and torch version, in words."""
    import torch

    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}, CUDA {torch.version.cuda}"
    return f"CPU ({torch.get_num_threads()} threads), torch {torch.__version__}"


if __name__ == "__main__":
    sys.exit(main())
