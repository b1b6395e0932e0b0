"""Input pipeline: whole-batch augmentation against per-sample v2, and what it does to training.

On the CPU (the default):

1. **Augmentation throughput** (pictures/s, batches of 128 read straight from the dataset):
   modforge's batched path (the default for in-memory corpora: crops, padding and flips of a
   whole batch in a few tensor operations, the same pictures) against its per-sample path
   (``data.transforms.batched: false``: torchvision v2 one picture at a time, seeded per
   sample), and a plain v2 loop with no seeding at all for reference. CIFAR-shaped
   (3×32×32; RandomCrop(32, padding=4), horizontal flip, normalise) and MNIST-shaped
   (1×28×28; RandomCrop(28, padding=2), normalise), 10,240 random pictures each. Goal: the
   batched path ≥ 5× the per-sample path.
2. **MNIST-family training**: ``configs/vision/fashion_mnist.yaml`` (its base: the small CNN,
   AdamW, batch 128, RandomCrop(28, padding=2), normalise) on 60,000 random pictures written by
   this script as MNIST-format IDX files, run by ``modforge train`` (``train_seconds`` of its
   summary; no validation split) against a hand-written loop over the same files: torchvision's
   ``FashionMNIST`` with the same v2 transforms, a shuffled DataLoader (batch 128, loading
   in-process), the same model built from modforge's parts, AdamW, cross-entropy. Both on 2
   threads, a fixed number of steps (``--steps``, default 200 of the epoch's 469: an epoch
   of each, repeated, takes too long on 2 cores; ``--steps 469`` is one epoch), fresh
   processes alternating, medians. Goal: modforge ≤ 0.90× the hand loop's time.

With ``--device cuda`` (on a GPU machine; ``benchmarks/device_check.py`` runs it with
``--quick``, under 90 s on an H200):

3. **Augmentation on the device**: the batched path with the pictures on the GPU
   (``data.device``) against the per-sample path on the host, pictures/s.
4. **ResNet-18 CIFAR-shaped epoch with the data on the device**: modforge's Trainer reading a
   training split held on the GPU (``data.device: cuda``; crop + flip + normalise made there)
   against the **model-only bound** — the same model and optimizer taking as many steps on
   one batch already on the device (no loader, no augmentation). fp32 and bf16 +
   channels_last. Goal: ≥ 0.95× the bound.

Children run with ``OMP_WAIT_POLICY=PASSIVE`` (the measuring machine may be shared: threads
that spin while waiting for a busy core make every parallel op pay a time slice).
``--smoke`` runs everything tiny (the device part on the CPU) and records nothing.

    python benchmarks/input_pipeline.py [--runs 5] [--steps 200] [--write]
    python benchmarks/input_pipeline.py --device cuda [--quick] [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _report import publish  # noqa: E402
from _timing import epoch_runner  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
AUGMENT_TARGET, TRAIN_TARGET, BOUND_TARGET = 5.0, 0.90, 0.95
BATCH = 128
CASES = {  # name: (shape, transforms)
    "CIFAR-shaped 3×32×32: crop (padding 4) + flip + normalise": (
        (3, 32, 32), [{"type": "random_crop", "args": {"size": 32, "padding": 4}}, "random_horizontal_flip"]),
    "MNIST-shaped 1×28×28: crop (padding 2) + normalise": (
        (1, 28, 28), [{"type": "random_crop", "args": {"size": 28, "padding": 2}}]),
}  # fmt: skip
ENV = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}


# ----------------------------------------------------------------------------- augmentation
def picture_split(shape, transforms, n: int, *, batched: bool = True, seed: int = 0):
    """A training split of ``n`` random uint8 pictures with ``transforms`` (modforge's pipeline)."""
    import torch

    from modforge.data.images.dataset import ImageDataset, TensorPictures
    from modforge.data.images.transforms import make_pipeline

    g = torch.Generator().manual_seed(seed)
    pictures = torch.randint(0, 256, (n, *shape), dtype=torch.uint8, generator=g)
    channels = shape[0]
    pipeline, _, _ = make_pipeline(transforms, "data.transforms.train", [0.45] * channels, [0.25] * channels, batched)
    return ImageDataset(TensorPictures(pictures), torch.randint(0, 10, (n,), generator=g), train_pipeline=pipeline,
                        eval_pipeline=pipeline, train=True, seed=seed)  # fmt: skip


def plain_v2(shape, transforms, n: int):
    """The reference: a v2 Compose called on each picture, no seeding; returns a batch reader."""
    import torch
    from torchvision.transforms import v2

    from modforge.data.images.transforms import build_transforms

    g = torch.Generator().manual_seed(0)
    pictures = torch.randint(0, 256, (n, *shape), dtype=torch.uint8, generator=g)
    channels = shape[0]
    compose = v2.Compose([*build_transforms(transforms, "t"), v2.ToDtype(torch.float32, scale=True),
                          v2.Normalize([0.45] * channels, [0.25] * channels)])  # fmt: skip
    return lambda positions: torch.stack([compose(pictures[i]) for i in positions])


def augment_rate(case: str, mode: str, n: int, device: str = "cpu") -> float:
    """Pictures/s of one path over ``n`` pictures in batches of 128 (after one warm-up batch)."""
    import torch

    shape, transforms = CASES[case]
    if mode == "v2":
        read = plain_v2(shape, transforms, n)
    else:
        split = picture_split(shape, transforms, n, batched=mode == "batched")
        if device != "cpu":
            from modforge.data.placement import place

            split = place(split, device)
        split.set_epoch(1)
        read = split.__getitems__
    order = torch.randperm(n, generator=torch.Generator().manual_seed(1)).tolist()
    batches = [order[i : i + BATCH] for i in range(0, n, BATCH)]
    read(batches[0])
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    sync()
    start = time.perf_counter()
    for positions in batches:
        read(positions)
    sync()
    return n / (time.perf_counter() - start)


# ----------------------------------------------------------------------------- MNIST-family training
def write_idx_corpus(folder: Path, n_train: int = 60_000, n_test: int = 10_000) -> None:
    """Random 28×28 pictures and labels as the four MNIST-format IDX files (uncompressed)."""
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)

    def write(name: str, array: np.ndarray) -> None:
        code = 0x08  # unsigned bytes
        header = bytes([0, 0, code, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
        (folder / name).write_bytes(header + array.astype(np.uint8).tobytes())

    for prefix, n in (("train", n_train), ("t10k", n_test)):
        write(f"{prefix}-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8))
        write(f"{prefix}-labels-idx1-ubyte", rng.integers(0, 10, n, dtype=np.uint8))


def modforge_seconds(root: Path, steps: int, run_dir: Path) -> float:
    """``modforge train`` of the Fashion-MNIST config for ``steps`` steps; its training seconds."""
    command = [sys.executable, "-m", "modforge", "train", str(ROOT / "configs" / "vision" / "fashion_mnist.yaml"),
               "--run-dir", str(run_dir), f"data.args.root={root}", "data.args.val_fraction=0",
               f"train.max_steps={steps}", "train.num_threads=2", "train.progress=never", "train.monitor=train_loss"]  # fmt: skip
    subprocess.run(command, check=True, cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return float(json.loads((run_dir / "summary.json").read_text())["train_seconds"])


def hand_loop(root: str, steps: int) -> float:
    """The hand-written loop (in a child process): seconds for ``steps`` training steps."""
    import torch
    import torch.nn.functional as F
    import torchvision
    import yaml
    from torch.utils.data import DataLoader
    from torchvision.transforms import v2

    import modforge as mf

    torch.set_num_threads(2)
    transform = v2.Compose([v2.ToImage(), v2.RandomCrop(28, padding=2), v2.ToDtype(torch.float32, scale=True),
                            v2.Normalize([0.4734], [0.2516])])  # fmt: skip
    dataset = torchvision.datasets.FashionMNIST(root, train=True, transform=transform)
    base = yaml.safe_load((ROOT / "configs" / "vision" / "base.yaml").read_text())
    torch.manual_seed(0)
    model = mf.build_model(base["model"], in_dim=1, num_classes=10)
    args = base["train"]["optimizer"]["args"]
    optimizer = torch.optim.AdamW(model.parameters(), lr=args["lr"], weight_decay=args["weight_decay"])
    loader = DataLoader(dataset, batch_size=BATCH, shuffle=True, num_workers=0,
                        generator=torch.Generator().manual_seed(0))  # fmt: skip
    model.train()
    start = time.perf_counter()
    done = 0
    while done < steps:
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            done += 1
            if done == steps:
                break
    return time.perf_counter() - start


# ----------------------------------------------------------------------------- on the device
def resnet18(width: float):
    import modforge as mf

    backbone = {"type": "resnet18", "args": {"stem": "cifar", "width": width}}
    return mf.build_model({"backbone": backbone, "neck": "global_avg_pool", "head": "linear",
                           "losses": ["cross_entropy"]}, in_dim=3, num_classes=10)  # fmt: skip


def epoch_and_bound(split, device_name: str, batch: int, width: float, precision: str, memory_format: str):
    """Two callables on one model and optimizer: an epoch of modforge's Trainer over ``split`` held
    on the device, and the model-only bound (as many steps on one batch already there)."""
    import torch
    import torch.nn.functional as F

    from modforge.data.loader import LoaderSettings, make_loader
    from modforge.engines import build_engine
    from modforge.train.trainer import Trainer

    device = torch.device(device_name)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    torch.manual_seed(0)
    model = resnet18(width)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    loader = make_loader(split, LoaderSettings(batch_size=batch, device=device_name, drop_last=True), train=True,
                         generator=torch.Generator().manual_seed(0))  # fmt: skip
    engine = build_engine({"type": "eager", "args": {"memory_format": memory_format}})
    trainer = Trainer(model, optimizer, max_epochs=1, device=device, precision=precision, engine=engine)
    ours = epoch_runner(trainer, loader, sync)

    x = next(iter(loader))["input"].to(device)
    y = torch.randint(0, 10, (len(x),), device=device)
    if memory_format == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    dtype = torch.bfloat16 if precision == "bf16" else None
    steps = len(loader)

    def bound() -> None:
        trainer.model.train()
        for _ in range(steps):
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
                loss = F.cross_entropy(trainer.model(x), y)
            loss.backward()
            optimizer.step()
        sync()

    return ours, bound


def device_epochs(device_name: str, n: int, batch: int, width: float, runs: int) -> list[tuple[str, float, float]]:
    """(setting, Trainer seconds, model-only bound seconds) per precision setting, medians of
    ``runs`` epochs after a warm-up epoch each, the two alternating."""
    shape, transforms = next(iter(CASES.values()))
    split = picture_split(shape, transforms, n)
    rows = []
    for setting, precision, memory_format in (("fp32", "32", "contiguous"),
                                              ("bf16 + channels_last", "bf16", "channels_last")):  # fmt: skip
        calls = dict(zip(("ours", "bound"), epoch_and_bound(split, device_name, batch, width, precision,
                                                             memory_format), strict=True))  # fmt: skip
        times: dict[str, list[float]] = {"ours": [], "bound": []}
        for call in calls.values():
            call()
        for r in range(runs):
            for name in ("ours", "bound") if r % 2 == 0 else ("bound", "ours"):
                start = time.perf_counter()
                calls[name]()
                times[name].append(time.perf_counter() - start)
        rows.append((setting, statistics.median(times["ours"]), statistics.median(times["bound"])))
    return rows


# ----------------------------------------------------------------------------- driver
def child(spec: str) -> None:
    """One measuring process: prints one JSON line."""
    import torch

    kind, *rest = spec.split("|")
    if kind == "augment":
        case, mode, n, device = rest
        torch.set_num_threads(2)
        print(json.dumps({"rate": augment_rate(case, mode, int(n), device)}))
    elif kind == "hand":
        root, steps = rest
        print(json.dumps({"seconds": hand_loop(root, int(steps))}))


def run_child(spec: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", spec], check=True, capture_output=True, text=True,
                         env=ENV)  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def augmentation_table(runs: int, n: int, device: str) -> tuple[str, bool]:
    modes = ("batched", "per_sample", "v2")
    rows, met = [], True
    for case in CASES:
        rates: dict[str, list[float]] = {m: [] for m in modes}
        for r in range(runs):
            for mode in modes if r % 2 == 0 else modes[::-1]:
                where = device if mode == "batched" else "cpu"
                if device == "cpu":
                    rates[mode].append(run_child(f"augment|{case}|{mode}|{n}|{where}")["rate"])
                else:  # one process: a CUDA start per measurement would not fit a device session
                    rates[mode].append(augment_rate(case, mode, n, where))
        ours, single, plain = (statistics.median(rates[m]) for m in modes)
        met &= ours / single >= AUGMENT_TARGET
        rows.append(f"| {case} | {ours:,.0f} | {single:,.0f} | {plain:,.0f} | **{ours / single:.1f}×** | "
                    f"{ours / plain:.1f}× |")  # fmt: skip
    where = "on the host" if device == "cpu" else f"the batched path's pictures on {device}, the others on the host"
    repeats = f"{runs} fresh processes" if device == "cpu" else f"{runs} rounds in one process"
    table = (f"Augmentation, {n:,} pictures in batches of {BATCH}, 2 threads, {where}; medians of {repeats}, "
             "alternating.\n\n"
             "| case | batched pictures/s | per-sample pictures/s | plain v2 loop pictures/s | batched ÷ per-sample | "
             "batched ÷ plain v2 |\n|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
             f"Goal: batched ≥ {AUGMENT_TARGET:.0f}× per-sample: {'met' if met else 'missed'}. The per-sample path "
             "seeds torch's generator per picture (results independent of workers and resume); the plain v2 loop "
             "does not, and is shown for scale.\n")  # fmt: skip
    return table, met


def training_table(runs: int, steps: int, n_train: int = 60_000) -> tuple[str, bool]:
    ours, theirs = [], []
    with tempfile.TemporaryDirectory(prefix="modforge-input-") as tmp:
        root = Path(tmp, "fm")
        write_idx_corpus(root / "FashionMNIST" / "raw", n_train, n_train // 6)
        for r in range(runs):
            order = ("modforge", "hand") if r % 2 == 0 else ("hand", "modforge")
            for which in order:
                if which == "modforge":
                    ours.append(modforge_seconds(root, steps, Path(tmp, f"run{r}")))
                else:
                    theirs.append(run_child(f"hand|{root}|{steps}")["seconds"])
    a, b = statistics.median(ours), statistics.median(theirs)
    met = a / b <= TRAIN_TARGET
    table = (f"MNIST-family training, {steps} steps of batch {BATCH} (an epoch of 60,000 is 469), 2 threads; "
             f"medians of {runs} fresh processes, alternating.\n\n"
             "| | seconds | pictures/s |\n|---|---|---|\n"
             f"| `modforge train configs/vision/fashion_mnist.yaml` (batched crops) | {a:.1f} | "
             f"{steps * BATCH / a:,.0f} |\n"
             f"| hand loop: torchvision FashionMNIST + v2 + DataLoader | {b:.1f} | {steps * BATCH / b:,.0f} |\n"
             f"| **ratio** | **{a / b:.2f}×** | |\n\n"
             f"Goal ≤ {TRAIN_TARGET:.2f}× the hand loop's time: {'met' if met else 'missed'}.\n")  # fmt: skip
    return table, met


def device_table(device: str, n: int, batch: int, width: float, runs: int) -> str:
    import torch

    rows = device_epochs(device, n, batch, width, runs)
    name = torch.cuda.get_device_name(device) if device.startswith("cuda") else "CPU"
    lines = [f"| {s} | {n / ours:,.0f} | {n / bound:,.0f} | **{bound / ours:.2f}×** |" for s, ours, bound in rows]
    met = all(bound / ours >= BOUND_TARGET for _, ours, bound in rows)
    return (f"ResNet-18 (CIFAR stem) epoch of {n:,} CIFAR-shaped pictures held on {device} ({name}, torch "
            f"{torch.__version__}), batch {batch}, crop + flip + normalise made there; medians of {runs} epochs.\n\n"
            "| setting | Trainer, data on the device (pictures/s) | model-only bound (pictures/s) | ratio |\n"
            "|---|---|---|---|\n" + "\n".join(lines) + "\n\n"
            f"Goal ≥ {BOUND_TARGET:.2f}× the bound: {'met' if met else 'missed'}.\n")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="fresh processes per contender (alternating)")
    parser.add_argument("--steps", type=int, default=200, help="training steps timed in the MNIST-family comparison")
    parser.add_argument("--device", default="cpu", help="cpu (sections 1-2) or cuda (sections 3-4)")
    parser.add_argument("--quick", action="store_true", help="on a device: fewer pictures and runs (< 90 s)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, every section on the CPU, nothing recorded")
    parser.add_argument("--write", action="store_true", help="record the figures in benchmarks/README.md")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    ns = parser.parse_args()
    if ns.child:
        child(ns.child)
        return 0
    if ns.smoke:
        print(augmentation_table(1, 512, "cpu")[0])
        print(training_table(1, 3, 2_000)[0])
        print(device_table("cpu", 64, 16, 0.125, 1))
        return 0
    if ns.device == "cpu":
        augment, _ = augmentation_table(ns.runs, 10_240, "cpu")
        training, _ = training_table(ns.runs, ns.steps)
        return publish("input_pipeline", augment + "\n" + training, ns.write)
    import torch

    torch.set_num_threads(2)
    runs = 3 if ns.quick else ns.runs
    augment, _ = augmentation_table(runs, 10_240 if ns.quick else 51_200, ns.device)
    epochs = device_table(ns.device, 10_240 if ns.quick else 50_000, 256, 1.0, runs)
    return publish("input_pipeline_device", augment + "\n" + epochs, ns.write)


if __name__ == "__main__":
    sys.exit(main())
