"""GPU readiness: modforge's Trainer vs a hand-written loop with the same settings, on a GPU.

1. **CIFAR-shaped ResNet-18 training** (3×32×32 uint8 pictures in memory, 4-pixel padded
   crops and flips through modforge's image pipeline, batch 256, SGD with momentum) in
   images/s, for each setting: fp32; AMP fp16 with a GradScaler; bf16 autocast; bf16 with
   channels_last; bf16 + channels_last + torch.compile, and the same with CUDA graphs
   (torch.compile's ``reduce-overhead``: the step's kernels replayed from a recording). Both contenders read the same dataset
   through DataLoaders with the same workers and pinned memory, copy batches with
   ``non_blocking``, build the same model (``resnet18``, cifar stem, + linear head) from the
   same seed; the loop is what one would write by hand (autocast, scaler, ``channels_last``
   inputs, ``torch.compile``). Goal: modforge ≥ 1.00× the loop in every setting. Third
   column, the **model-only bound**: the hand loop's model, optimizer and settings taking as
   many training steps on one batch already on the device (no loader, no copies, no
   augmentation) — what any input pipeline can at best reach.
2. **AASIST training steps/s** (batch 8, 64,600 samples): modforge's ``aasist`` + ``linear``
   vs the authors' layout rebuilt in ``benchmarks/aasist.py``, with the same weights.

Each timing: one warm-up epoch (compilation, cuDNN autotuning, worker start-up), then the
median of ``--runs`` timed epochs, contenders alternating (A B C C B A …). The table names
the device, torch, CUDA and the date. Without a CUDA device the script runs only as a smoke
test (``--smoke``: tiny sizes on the CPU, settings the CPU has, nothing recorded) — CI runs
it that way; GPU figures are recorded with ``--write``. ``--quick`` (10,240 pictures a
epoch) is what ``benchmarks/device_check.py`` runs to fit a device session (~3 minutes on
an H200, two of them compiling).

    python benchmarks/gpu.py [--runs 3] [--workers 8] [--quick] [--write]   # on a GPU machine
    python benchmarks/gpu.py --smoke                                        # anywhere
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _timing import epoch_runner, interleaved_times  # noqa: E402

TARGET = 1.00
SETTINGS = {  # name: (precision, memory format, torch.compile's mode or None: eager)
    "fp32": ("32", "contiguous", None),
    "AMP fp16 + GradScaler": ("16", "contiguous", None),
    "bf16": ("bf16", "contiguous", None),
    "bf16 + channels_last": ("bf16", "channels_last", None),
    "bf16 + channels_last + compile": ("bf16", "channels_last", "default"),
    "bf16 + channels_last + compile, CUDA graphs": ("bf16", "channels_last", "reduce-overhead"),
}


def cifar_shaped(n: int, seed: int = 0):
    """Splits of ``n`` random CIFAR-shaped pictures with the standard crop + flip training pipeline."""
    import torch

    from modforge.data.images.dataset import TensorPictures
    from modforge.data.images.splits import picture_splits

    g = torch.Generator().manual_seed(seed)
    pictures = torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=g)
    labels = torch.randint(0, 10, (n,), generator=g)
    transforms = {"train": [{"type": "random_crop", "args": {"size": 32, "padding": 4}}, "random_horizontal_flip"]}
    return picture_splits(train=(TensorPictures(pictures), labels), test=None, class_names=[str(i) for i in range(10)],
                          seed=seed, val_fraction=0.0, transforms=transforms, mean=[0.49, 0.48, 0.45],
                          std=[0.25, 0.24, 0.26], described="random")  # fmt: skip


WIDTH = [1.0]
"""ResNet-18's channel multiplier (1: the real network; the smoke test uses 1/8)."""


def resnet18():
    import modforge as mf

    backbone = {"type": "resnet18", "args": {"stem": "cifar", "width": WIDTH[0]}}
    return mf.build_model({"backbone": backbone, "neck": "global_avg_pool",
                           "head": "linear", "losses": ["cross_entropy"]}, in_dim=3, num_classes=10)  # fmt: skip


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def modforge_epoch(splits, setting: tuple, device, batch: int, workers: int):
    """A callable training one epoch with modforge's Trainer (its engine, precision, loaders)."""
    import torch

    from modforge.data.loader import LoaderSettings, make_loader
    from modforge.engines import build_engine
    from modforge.train.trainer import Trainer

    precision, memory_format, mode = setting
    torch.manual_seed(0)
    model = resnet18()
    args = {"memory_format": memory_format, **({"mode": mode} if mode else {})}
    engine = build_engine({"type": "compile" if mode else "eager", "args": args})
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    settings = LoaderSettings(batch_size=batch, num_workers=workers, persistent_workers=workers > 0,
                              pin_memory=device.type == "cuda")  # fmt: skip
    loader = make_loader(splits.train, settings, train=True, generator=torch.Generator().manual_seed(0))
    trainer = Trainer(model, optimizer, max_epochs=1, device=device, precision=precision, engine=engine)
    return epoch_runner(trainer, loader, lambda: _sync(device))


def loop_epoch(splits, setting: tuple, device, batch: int, workers: int):
    """The same epoch, written by hand: plain DataLoader, autocast, GradScaler, channels_last, compile.

    Returns two callables on the same model and optimizer: the epoch, and the model-only bound —
    as many steps as the epoch has, on the loader's first batch kept on the device."""
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader

    from modforge.data.base import collate

    precision, memory_format, mode = setting
    torch.manual_seed(0)
    model = resnet18().to(device)
    if memory_format == "channels_last":
        model = model.to(memory_format=torch.channels_last)
    if mode:  # rounded in 16 bits as eager rounds, as modforge's compile engine does (read at each compilation)
        import torch._inductor.config as inductor_config

        inductor_config.emulate_precision_casts = True
    step_model = torch.compile(model, mode=None if mode == "default" else mode) if mode else model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    scaler = torch.amp.GradScaler(device.type) if precision == "16" else None
    dtype = {"16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    loader = DataLoader(splits.train, batch_size=batch, shuffle=True, num_workers=workers, collate_fn=collate,
                        persistent_workers=workers > 0, pin_memory=device.type == "cuda",
                        generator=torch.Generator().manual_seed(0))  # fmt: skip
    # the dataset serves whole batches through __getitems__; DataLoader's batch sampler hands them over

    def step(x, y) -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = F.cross_entropy(step_model(x), y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()

    def to_device(batch_):
        x = batch_["input"].to(device, non_blocking=True)
        y = batch_["label"].to(device, non_blocking=True)
        if memory_format == "channels_last":
            x = x.contiguous(memory_format=torch.channels_last)
        return x, y

    def run() -> None:
        model.train()
        for batch_ in loader:
            step(*to_device(batch_))
        _sync(device)

    resident = to_device(next(iter(loader)))  # one full batch, on the device for good
    steps = len(loader)

    def bound() -> None:
        model.train()
        for _ in range(steps):
            step(*resident)
        _sync(device)

    return run, bound


def alternate(calls: dict, runs: int, warm: bool = True) -> dict[str, float]:
    """Median seconds per call; one untimed warm-up call each (``warm``), then A B C C B A … order."""
    times = interleaved_times(calls, runs, warm)
    return {name: statistics.median(values) for name, values in times.items()}


def aasist_steps(device, runs: int, samples: int, batch: int, warm: bool = True) -> dict[str, float]:
    """Training steps/s of modforge's AASIST and the authors' layout, same weights, on ``device``
    (``warm``: after an untimed warm-up step each; the smoke test, which measures nothing, skips it)."""
    import torch
    from aasist import _train, build_pair

    reference, ours = build_pair()
    reference, ours = reference.to(device), ours.to(device)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch, samples, generator=g).to(device)
    y = torch.randint(0, 2, (batch,), generator=g).to(device)
    steps = {"modforge": _train(ours, x, y), "reference": _train(reference, x, y)}

    def synced(step):
        def call():
            step()
            _sync(device)

        return call

    seconds = alternate({name: synced(step) for name, step in steps.items()}, runs, warm)
    return {name: 1.0 / s for name, s in seconds.items()}


def describe(device) -> str:
    """The device, torch and CUDA versions, in words."""
    import torch

    if device.type != "cuda":
        return f"CPU (smoke test), torch {torch.__version__}"
    cudnn = torch.backends.cudnn.version()
    return (f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}, CUDA {torch.version.cuda}"
            f"{f', cuDNN {cudnn}' if cudnn else ''}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--write", action="store_true", help="record the figures in benchmarks/README.md")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on whatever device there is; nothing recorded")
    parser.add_argument(
        "--quick", action="store_true", help="10,240 pictures an epoch instead of 20,480 (device_check)"
    )
    parser.add_argument("--profile", action="store_true", help="the compiled setting: then an epoch of each profiled")
    ns = parser.parse_args()
    import torch

    cuda = torch.cuda.is_available()
    if not cuda and not ns.smoke:
        print("no CUDA device here: run on a GPU machine, or --smoke for the CPU smoke test")
        return 2
    device = torch.device("cuda" if cuda else "cpu")
    # the smoke test: one step of two pictures an epoch (as before, of sixteen): every path runs, and on a CPU,
    # where fp16 has no fast kernels, its backward costs ~0.14 s a picture (2 s a step at sixteen)
    n, batch, workers = (2, 2, 0) if ns.smoke else (10_240 if ns.quick else 20_480, 256, ns.workers)
    WIDTH[0] = 0.125 if ns.smoke else 1.0
    settings = SETTINGS if cuda else {k: v for k, v in SETTINGS.items() if not v[2]}  # compiling costs minutes on a CPU
    splits = cifar_shaped(n)
    rows = {name: "| " + name + " | not measured: the run ended before it |  |  |  |  |" for name in settings}
    aasist: dict[str, float] = {}

    def record() -> str:  # the table so far, recorded after every row: a run stopped at a limit keeps its rows
        lines = "\n".join(rows.values())
        text = (
            f"{describe(device)}; {date.today().isoformat()}. ResNet-18 (CIFAR stem) on {n:,} CIFAR-shaped "
            f"pictures, batch {batch}, {workers} loader workers"
            f"{', pinned memory' if cuda else ' (smoke figures are not measurements)'}; medians of {ns.runs} epochs "
            f"{'without' if ns.smoke else 'after'} a warm-up, contenders alternating. The model-only bound: the hand loop's model taking the same "
            "number of steps on one batch already on the device (no loader, no copies, no augmentation).\n\n"
            "| setting | modforge images/s | hand-written loop images/s | model-only bound images/s "
            "| modforge / loop | modforge / bound |\n|---|---|---|---|---|---|\n" + lines + "\n\nAASIST training "
            + (f"steps/s: modforge {aasist['modforge']:.2f}, authors' layout {aasist['reference']:.2f} "
               f"(**{aasist['modforge'] / aasist['reference']:.2f}×**)" if aasist else "steps/s: not measured yet")
            + f". Goal: ≥ {TARGET:.2f}× the loop in every setting.\n"
        )  # fmt: skip
        if ns.write and cuda:
            from _report import update_readme

            update_readme("gpu", text)
        return text

    # the compiled setting last, after AASIST: compiling takes the longest, and a limit then costs only its row
    for name, setting in settings.items():
        if setting[2]:
            continue
        rows[name] = measure(name, splits, setting, device, batch, workers, n, ns.runs, not ns.smoke)
        record()
    aasist = aasist_steps(device, max(1, ns.runs), 4_000 if ns.smoke else 64_600, 2 if ns.smoke else 8, not ns.smoke)
    record()
    for name, setting in settings.items():
        if setting[2]:
            rows[name] = measure(name, splits, setting, device, batch, workers, n, ns.runs, not ns.smoke,
                                 profile=ns.profile)  # fmt: skip
    print(record())
    return 0


def measure(name: str, splits, setting: tuple, device, batch: int, workers: int, n: int, runs: int,
            warm: bool = True, profile: bool = False) -> str:  # fmt: skip
    """One setting's table row: images/s of modforge, the hand loop and the model-only bound
    (``warm``: after an untimed warm-up call each; the smoke test, which measures nothing, skips it;
    ``profile``: then one more epoch of modforge and of the loop under torch.profiler, printed)."""
    started = time.perf_counter()
    loop, bound = loop_epoch(splits, setting, device, batch, workers)
    calls = {"modforge": modforge_epoch(splits, setting, device, batch, workers), "loop": loop, "bound": bound}
    seconds = alternate(calls, max(1, runs), warm)
    speed = {key: n / value for key, value in seconds.items()}
    row = (f"| {name} | {speed['modforge']:,.0f} | {speed['loop']:,.0f} | {speed['bound']:,.0f} | "
           f"**{speed['modforge'] / speed['loop']:.2f}×** | {speed['modforge'] / speed['bound']:.2f}× |")  # fmt: skip
    print(row, f"({time.perf_counter() - started:.0f} s)", flush=True)
    if profile:
        for contender in ("modforge", "loop"):
            print(profiled_epoch(f"{name}, {contender}", calls[contender]), flush=True)
    return row


def profiled_epoch(label: str, call) -> str:
    """One epoch of ``call`` under torch.profiler: its wall time, the GPU kernels' time and launches,
    and the busiest host operations — whether a gap between two contenders is in the kernels (other
    graphs, other fusions) or on the host (launches, guards, Python)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    started = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        call()
    wall = time.perf_counter() - started
    events = prof.key_averages()
    kernels = sum(e.self_device_time_total for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
    launches = sum(e.count for e in events if e.key in ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel"))
    return (f"### {label}: {wall:.2f} s under the profiler; GPU kernels {kernels / 1e6:.2f} s; {launches} launches\n"
            + events.table(sort_by="self_cpu_time_total", row_limit=10))


if __name__ == "__main__":
    sys.exit(main())
