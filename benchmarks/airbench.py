"""airbench94 as a modforge config vs airbench's own code (KellerJordan/cifar10-airbench, PyPI 0.1.8).

Two measurements (airbench is not a modforge dependency: ``pip install airbench==0.1.8`` or put
its folder on ``PYTHONPATH``; it needs torchvision):

* ``--parity`` (CPU, fp32): the same initial weights (modforge's, copied into airbench's network
  in parameter order), the same pictures in the same batch order (random CIFAR-shaped data, no
  augmentation on either side), the same whitening pictures; the first ``--steps`` training
  losses of ``configs/vision/cifar10_airbench94.yaml`` trained by modforge's Trainer and of
  airbench's own ``train94``. airbench hard-codes ``.cuda()``, ``.half()``, CUDA events and a
  test-set loader; here — and only here — its network is built with ``Module.cuda``/``half``
  made no-ops, CUDA timing events are stand-ins and its test loader is never read
  (``verbose=False``). Its rates are per example of a summed loss, modforge's per mean loss, so
  modforge's learning rates are scaled by ``batch / 1024`` (exact for a power-of-two batch).
* ``--speed`` (CUDA): wall time of ``train94`` on airbench's own GPU-resident loader (random
  uint8 pictures saved as its ``train.pt``) against modforge's config trained on the same
  pictures for the same number of optimizer steps, both after one warm-up run; modforge five ways:
  ``device`` — the config as shipped (``data.device: auto``: the pictures kept and augmented in
  whole batches on the GPU), reading CIFAR-10's python batches written by the benchmark;
  ``loader`` — the same with the pictures in host memory, augmented in loader workers; ``tensors`` — the pictures as normalised
  tensors held on the GPU, no augmentation (what the trainer and model cost on their own); ``half`` — the
  config with its weights in fp16 (``precision: 16-true``); ``graphs`` — the config compiled with CUDA graphs
  (``reduce-overhead``), timed from the start of training, after the compilation and warm-up (as airbench
  times its own compiled variant).

    python benchmarks/airbench.py --parity [--steps 20] [--write]
    python benchmarks/airbench.py --speed [--quick] [--write] [--profile]
"""

from __future__ import annotations

import argparse
import contextlib
import math
import pickle
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import update_readme  # noqa: E402

# this file is named like the package it compares with: ``import airbench`` must find the package
HERE = str(Path(__file__).resolve().parent)
sys.path[:] = [p for p in sys.path if str(Path(p or ".").resolve()) != HERE]

import modforge as mf  # noqa: E402
from modforge.core.config import load_config  # noqa: E402
from modforge.data.base import ArrayDataset, DataSplits  # noqa: E402
from modforge.experiment.runner import Experiment  # noqa: E402
from modforge.experiment.schema import validate_config  # noqa: E402
from modforge.train.callbacks.base import Callback  # noqa: E402

CONFIG = ROOT / "configs" / "vision" / "cifar10_airbench94.yaml"
CIFAR_MEAN = torch.tensor((0.4914, 0.4822, 0.4465)).view(1, 3, 1, 1)
CIFAR_STD = torch.tensor((0.2470, 0.2435, 0.2616)).view(1, 3, 1, 1)
SECTION = "airbench"
MODES = {  # how modforge's side of --speed is fed
    "tensors": "modforge, pictures as normalised tensors on the GPU (no augmentation)",
    "device": "modforge, the config as shipped (`data.device: auto`: augmented in batches on the GPU)",
    "loader": "modforge, the config with its pictures in host memory (augmentation in loader workers)",
    "half": "modforge, the config as shipped but its weights stored in fp16 (`precision: 16-true`)",
    "graphs": "modforge, the config as shipped, compiled with CUDA graphs (`engine: compile`, `reduce-overhead`; "
              "compilation not timed)",
}
COMPILED = {"graphs": {"type": "compile", "args": {"mode": "reduce-overhead", "memory_format": "channels_last"}}}
"""The modes that train through torch.compile, and the engine each sets."""


# ---------------------------------------------------------------------------------------- data
def random_pictures(count: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """CIFAR-shaped uint8 pictures [N, 32, 32, 3] and labels in 0..9 (no CIFAR files are reachable)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (count, 32, 32, 3), dtype=torch.uint8, generator=g), torch.randint(0, 10, (count,),
                                                                                                      generator=g)  # fmt: skip


def normalised(pictures: torch.Tensor) -> torch.Tensor:
    """uint8 [N, H, W, 3] → float [N, 3, H, W] scaled to [0, 1] and normalised by CIFAR-10's statistics."""
    return (pictures.permute(0, 3, 1, 2).float() / 255 - CIFAR_MEAN) / CIFAR_STD


class EpochBatches:
    """Batches of fixed pictures in a seeded order per epoch (full batches only), as dicts for
    modforge; the epoch is set by the trainer (``dataset.set_epoch``)."""

    def __init__(self, inputs: torch.Tensor, labels: torch.Tensor, batch: int, seed: int = 0):
        self.inputs, self.labels, self.batch, self.seed = inputs, labels, batch, seed
        self.dataset, self.epoch = self, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def order(self, epoch: int) -> torch.Tensor:
        return torch.randperm(len(self.labels), generator=torch.Generator().manual_seed(self.seed * 1000 + epoch))

    def __len__(self) -> int:
        return len(self.labels) // self.batch

    def batches(self, epoch: int):
        order = self.order(epoch)
        for i in range(len(self)):
            idx = order[i * self.batch : (i + 1) * self.batch]
            yield self.inputs[idx], self.labels[idx]

    def __iter__(self):
        for x, y in self.batches(self.epoch):
            yield {"input": x, "label": y}


class AirbenchBatches:
    """The same batches in the interface airbench's ``train`` reads from its ``CifarLoader``
    (``batch_size``, ``epoch``, ``images`` for the whitening, ``normalize``, ``labels``)."""

    def __init__(self, source: EpochBatches, whiten_pictures: torch.Tensor):
        self.source, self.batch_size, self.epoch = source, source.batch, 0
        self.images, self.last_labels = whiten_pictures, None

    def normalize(self, images: torch.Tensor) -> torch.Tensor:  # the pictures are normalised already
        return images

    def __len__(self) -> int:
        return len(self.source)

    def __iter__(self):
        epoch, self.epoch = self.epoch, self.epoch + 1
        for x, y in self.source.batches(epoch):
            self.last_labels = y
            yield x, y


# ------------------------------------------------------------------------------------ modforge
def recipe_config(*, batch: int, steps: int, steps_per_epoch: int, device: str, precision: str,
                  whiten_samples: int = 5000, whiten_bias_epochs: int | None = None,
                  root: str | None = None, data_changes: dict[str, Any] | None = None,
                  engine: dict[str, Any] | None = None) -> Any:  # fmt: skip
    """The shipped config, sized for ``steps`` optimizer steps of ``batch`` pictures: the learning
    rates scaled by ``batch / 1024`` as its comment says, loading in-process unless ``root`` is given."""
    cfg = load_config(CONFIG)
    data, train = cfg.data["data"], cfg.data["train"]
    data["batch_size"] = batch
    if root is None:
        data.update(num_workers=0, persistent_workers=False, pin_memory=False, device=None)
    else:
        data["args"]["root"] = root
    data.update(data_changes or {})
    train["max_epochs"] = math.ceil(steps / steps_per_epoch)
    train["max_steps"] = steps
    train.update(device=device, precision=precision, log_every=10**9, **({"engine": engine} if engine else {}))
    train["optimizer"]["args"]["lr"] *= batch / 1024
    train["optimizer"]["param_groups"][0]["args"]["lr"] *= batch / 1024
    for spec in train["callbacks"]:
        if spec["type"] == "whitening_init":
            spec["args"]["samples"] = whiten_samples
        if spec["type"] == "freeze_parameters" and whiten_bias_epochs is not None:
            spec["args"]["from_epoch"] = whiten_bias_epochs
    return validate_config(cfg)


def tensor_splits(inputs: torch.Tensor, labels: torch.Tensor) -> DataSplits:
    data = ArrayDataset(inputs, labels)
    return DataSplits(train=data, val=None, test=None, num_classes=10, in_dim=3, layout="image",
                      input_shape=(3, 32, 32))  # fmt: skip


class StartClock(Callback):
    """The time training starts: the first hook of ``fit`` after the engine prepared (compiled) the model."""

    order = -(10**9)  # before every other callback (the whitening is timed)
    started: float | None = None

    def on_fit_start(self, trainer) -> None:
        if trainer.device.type == "cuda":
            torch.cuda.synchronize()
        self.started = time.perf_counter()


class LossRecorder(Callback):
    """Keeps every optimizer step's training loss (read on the host: parity runs only)."""

    order = 99

    def __init__(self):
        self.losses: list[float] = []

    def on_step_end(self, trainer) -> None:
        self.losses.append(float(trainer.last_loss))


def modforge_losses(exp: Experiment, loader: EpochBatches) -> list[float]:
    trainer = exp.trainer(loader, None)
    recorder = LossRecorder()
    trainer.add_callback(recorder)
    trainer.fit(loader)
    return recorder.losses


# ------------------------------------------------------------------------------------ airbench
@contextlib.contextmanager
def airbench_on_cpu():
    """airbench's ``train`` and ``make_net94`` on the CPU: ``Module.cuda``/``half`` do nothing,
    CUDA timing events are stand-ins, its test-set loader is a stand-in that is never read."""
    from airbench import utils

    class Event:
        def __init__(self, **_kw):
            pass

        def record(self) -> None:
            pass

        def elapsed_time(self, _other) -> float:
            return 0.0

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(torch.nn.Module, "cuda", lambda self, *a, **k: self))
        stack.enter_context(mock.patch.object(torch.nn.Module, "half", lambda self, *a, **k: self))
        stack.enter_context(mock.patch.object(torch.cuda, "Event", Event))
        stack.enter_context(mock.patch.object(torch.cuda, "synchronize", lambda *a, **k: None))
        stack.enter_context(mock.patch.object(utils, "CifarLoader", lambda *a, **k: None))
        yield


def airbench_net_with(state: dict[str, torch.Tensor]) -> torch.nn.Module:
    """airbench94's network (built on the CPU in fp32) holding ``state``'s tensors, matched in order."""
    from airbench import lib_airbench94

    with airbench_on_cpu():
        net = lib_airbench94.make_net94()
    theirs = net.state_dict()
    mine = [v for k, v in state.items() if k.startswith("parts.")]
    if len(mine) != len(theirs):
        raise RuntimeError(f"airbench's network has {len(theirs)} state entries, modforge's {len(mine)}")
    for (name, value), source in zip(theirs.items(), mine, strict=True):
        if value.shape != source.shape:
            raise RuntimeError(f"{name}: airbench {tuple(value.shape)} vs modforge {tuple(source.shape)}")
    net.load_state_dict(dict(zip(theirs, mine, strict=True)))
    return net


def airbench_losses(
    net: torch.nn.Module, loader: AirbenchBatches, *, steps: int, whiten_bias_epochs: int
) -> list[float]:
    """The training losses of airbench's own ``train94`` (mean over the batch) for ``steps`` steps."""
    from airbench import lib_airbench94

    smoothing = lib_airbench94.hyp["opt"]["label_smoothing"]
    losses: list[float] = []

    def record(_module, _inputs, output):
        with torch.no_grad():
            losses.append(float(F.cross_entropy(output.float(), loader.last_labels, label_smoothing=smoothing)))

    handle = net.register_forward_hook(record)
    try:
        with airbench_on_cpu():
            lib_airbench94.train94(loader, epochs=steps / len(loader), whiten_bias_epochs=whiten_bias_epochs,
                                   make_net=lambda: net, verbose=False)  # fmt: skip
    finally:
        handle.remove()
    return losses


def nudged(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` with every floating weight moved to the next float32 value up (one unit in the last place)."""
    return {k: torch.nextafter(v, torch.full_like(v, math.inf)) if v.is_floating_point() else v.clone()
            for k, v in state.items()}  # fmt: skip


def parity(*, steps: int = 20, batch: int = 64, pictures: int = 640, seed: int = 0, whiten_bias_epochs: int = 1,
           floor: bool = True) -> dict[str, Any]:  # fmt: skip
    """The first ``steps`` fp32 losses of both, and their largest difference. With ``floor``,
    also airbench against itself started from weights one float32 step away: how far float
    rounding alone carries the losses in as many steps (the floor of any re-implementation)."""
    raw, labels = random_pictures(pictures, seed)
    inputs = normalised(raw)
    source = EpochBatches(inputs, labels, batch, seed)
    whiten = min(5000, pictures)
    cfg = recipe_config(batch=batch, steps=steps, steps_per_epoch=len(source), device="cpu", precision="32",
                        whiten_samples=whiten, whiten_bias_epochs=whiten_bias_epochs)  # fmt: skip
    torch.manual_seed(seed)
    exp = Experiment.build(cfg, tensor_splits(inputs, labels))
    first = torch.cat([x for x, _ in source.batches(0)])[:whiten]  # what whitening_init reads: epoch 0's first pictures
    state = {k: v.clone() for k, v in exp.model.state_dict().items()}
    theirs = airbench_losses(airbench_net_with(state), AirbenchBatches(source, first), steps=steps,
                             whiten_bias_epochs=whiten_bias_epochs)  # fmt: skip
    mine = modforge_losses(exp, source)
    result = {"steps": steps, "batch": batch, "modforge": mine, "airbench": theirs,
              "max_abs_diff": max(abs(a - b) for a, b in zip(mine, theirs, strict=True))}  # fmt: skip
    if floor:
        again = airbench_losses(airbench_net_with(nudged(state)), AirbenchBatches(source, first), steps=steps,
                                whiten_bias_epochs=whiten_bias_epochs)  # fmt: skip
        result["airbench_nudged"] = again
        result["floor_max_abs_diff"] = max(abs(a - b) for a, b in zip(again, theirs, strict=True))
    return result


# --------------------------------------------------------------------------------------- speed
def write_cifar_python(root: Path, pictures: torch.Tensor, labels: torch.Tensor) -> None:
    """CIFAR-10's python batches (``cifar-10-batches-py``) holding ``pictures`` (5 training batches)
    and the same pictures' first 10,000 as the test batch."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    flat = pictures.permute(0, 3, 1, 2).reshape(len(pictures), -1).numpy()
    parts = torch.arange(len(pictures)).chunk(5)
    for i, idx in enumerate(parts, start=1):
        entry = {b"data": flat[idx.numpy()], b"labels": labels[idx].tolist(), b"batch_label": f"batch {i}".encode()}
        (folder / f"data_batch_{i}").write_bytes(pickle.dumps(entry))
    test = {b"data": flat[:10000], b"labels": labels[:10000].tolist(), b"batch_label": b"test"}
    (folder / "test_batch").write_bytes(pickle.dumps(test))
    names = [b"airplane", b"automobile", b"bird", b"cat", b"deer", b"dog", b"frog", b"horse", b"ship", b"truck"]
    (folder / "batches.meta").write_bytes(pickle.dumps({b"label_names": names}))


def _synchronised_seconds(run) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    run()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def fit_seconds(cfg: Any, splits: DataSplits | None, *, from_training_start: bool = False) -> float:
    """Seconds of one ``Trainer.fit`` of a fresh build of ``cfg`` (the build and the data reading
    are not timed; the whitening, the loader's workers and every step are; ``from_training_start``:
    nor is the engine's preparation — a compilation and its warm-up)."""
    exp = Experiment.build(cfg, splits)
    train_loader = exp.loaders()[0]
    trainer = exp.trainer(train_loader, None)
    clock = StartClock()
    trainer.add_callback(clock)
    sync = torch.cuda.synchronize if trainer.device.type == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    trainer.fit(train_loader)
    sync()
    return time.perf_counter() - (clock.started if from_training_start else start)


def speed(*, epochs: float, runs: int, workers: int, measured: Any = None) -> dict[str, Any]:
    """Seconds of airbench's ``train94`` and of modforge's config (each of :data:`MODES`) for the same
    steps; ``measured(result so far)`` after each mode (a run stopped at a time limit keeps its rows)."""
    from airbench import lib_airbench94, utils

    raw, labels = random_pictures(50000)
    hyp = lib_airbench94.hyp
    out: dict[str, Any] = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "epochs": epochs}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for split in ("train", "test"):
            torch.save({"images": raw, "labels": labels, "classes": list(range(10))}, folder / f"{split}.pt")
        write_cifar_python(folder / "cifar10", raw, labels)
        loader = utils.CifarLoader(str(folder), train=True, batch_size=hyp["opt"]["batch_size"], aug=hyp["aug"],
                                   altflip=True)  # fmt: skip
        steps = math.ceil(len(loader) * epochs)
        out["steps"] = steps
        with mock.patch.object(utils, "CifarLoader", lambda *a, **k: None):  # its test set is never read (verbose off)

            def theirs() -> None:
                lib_airbench94.train94(loader, epochs=epochs, verbose=False)

            theirs()  # warm-up: cuDNN autotuning
            out["airbench_s"] = sorted(_synchronised_seconds(theirs) for _ in range(runs))[runs // 2]
        inputs = normalised(raw)
        changes = {"loader": {"num_workers": workers, "device": None, "persistent_workers": True},
                   "device": {"device": "cuda", "num_workers": 0}, "tensors": {"device": "cuda"},
                   "half": {"device": "cuda", "num_workers": 0}, "graphs": {"device": "cuda", "num_workers": 0}}
        for mode in MODES:
            root = None if mode == "tensors" else str(folder / "cifar10")
            cfg = recipe_config(batch=1024, steps=steps, steps_per_epoch=len(loader), device="cuda",
                                precision="16-true" if mode == "half" else "16", root=root,
                                data_changes=changes.get(mode), engine=COMPILED.get(mode))  # fmt: skip
            splits = tensor_splits(inputs, labels) if mode == "tensors" else None
            compiled = mode in COMPILED
            if mode == "tensors" or compiled:  # warm-up (cuDNN autotuning; compiled: Inductor's caches)
                fit_seconds(cfg, splits)
            out[f"modforge_{mode}_s"] = sorted(fit_seconds(cfg, splits, from_training_start=compiled)
                                               for _ in range(runs))[runs // 2]  # fmt: skip
            if measured is not None:
                measured(out)
    return out


def profile(*, steps: int = 48) -> str:
    """Where the time of ``steps`` optimizer steps goes, for airbench's ``train94`` and for modforge's
    config on tensors held on the GPU, as shipped, and in ``16-true`` (``--profile``, after ``--speed``:
    a diagnosis for later sessions, which may have no device): torch.profiler's busiest operations by
    GPU time and by host time, the GPU's busy share of the wall time, and how often the host waited
    for the device."""
    from airbench import lib_airbench94, utils
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as profiled

    raw, labels = random_pictures(50000)
    lines = []

    def report(name: str, run) -> None:
        torch.cuda.synchronize()
        start = time.perf_counter()
        with profiled(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            run()
            torch.cuda.synchronize()
        wall = time.perf_counter() - start
        events = prof.key_averages()
        device_us = sum(e.self_device_time_total for e in events if e.device_type.name == "CUDA")
        waits = {e.key: e.count for e in events if "Synchronize" in e.key or e.key == "aten::item"
                 or e.key == "aten::_local_scalar_dense"}  # fmt: skip
        lines.append(f"### {name}: {wall:.2f} s wall under the profiler; GPU kernels busy {device_us / 1e6:.2f} s "
                     f"({device_us / 1e6 / wall:.0%}); host waits {waits}\n")  # fmt: skip
        lines.append(events.table(sort_by="self_device_time_total", row_limit=12))
        lines.append(events.table(sort_by="self_cpu_time_total", row_limit=12))

    with tempfile.TemporaryDirectory() as tmp:
        torch.save({"images": raw, "labels": labels, "classes": list(range(10))}, Path(tmp) / "train.pt")
        torch.save({"images": raw, "labels": labels, "classes": list(range(10))}, Path(tmp) / "test.pt")
        hyp = lib_airbench94.hyp
        loader = utils.CifarLoader(tmp, train=True, batch_size=hyp["opt"]["batch_size"], aug=hyp["aug"],
                                   altflip=True)  # fmt: skip
        epochs = steps / len(loader)
        with mock.patch.object(utils, "CifarLoader", lambda *a, **k: None):
            report(f"airbench train94, {steps} steps", lambda: lib_airbench94.train94(loader, epochs=epochs,
                                                                                      verbose=False))  # fmt: skip
        write_cifar_python(Path(tmp) / "cifar10", raw, labels)
        for mode in ("tensors", "device", "half"):  # on the GPU: plain tensors, the config as shipped, in 16-true
            root = None if mode == "tensors" else str(Path(tmp) / "cifar10")
            cfg = recipe_config(batch=1024, steps=steps, steps_per_epoch=48, device="cuda",
                                precision="16-true" if mode == "half" else "16", root=root,
                                data_changes={"device": "cuda", "num_workers": 0})  # fmt: skip
            exp = Experiment.build(cfg, tensor_splits(normalised(raw), labels) if mode == "tensors" else None)
            train_loader = exp.loaders()[0]
            trainer = exp.trainer(train_loader, None)
            report(f"modforge, {mode}, {steps} steps", lambda t=trainer, ld=train_loader: t.fit(ld))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------- main
def parity_table(result: dict[str, Any]) -> str:
    floor = "airbench_nudged" in result
    rows = []
    for i, (a, b) in enumerate(zip(result["modforge"], result["airbench"], strict=True)):
        extra = f" {abs(result['airbench_nudged'][i] - b):.2e} |" if floor else ""
        rows.append(f"| {i + 1} | {a:.6f} | {b:.6f} | {abs(a - b):.2e} |{extra}")
    head = "| step | modforge | airbench | abs diff |" + (" airbench, weights 1 ulp away: abs diff |" if floor else "")
    rule = "|---|---|---|---|" + ("---|" if floor else "")
    text = (f"**Parity (CPU, fp32)**: the first {result['steps']} training losses of "
            f"`configs/vision/cifar10_airbench94.yaml` (batch {result['batch']}, learning rates scaled by "
            f"batch/1024, no augmentation, random labels) and of airbench 0.1.8's `train94`, same initial weights, "
            f"pictures and batch order: max |difference| **{result['max_abs_diff']:.2e}** (goal ≤ 1e-3).")  # fmt: skip
    if floor:
        text += (f" Float rounding alone: airbench against itself started from weights one float32 step away "
                 f"differs by up to **{result['floor_max_abs_diff']:.2e}** in as many steps (last column).")  # fmt: skip
    return text + "\n\n" + "\n".join([head, rule, *rows]) + "\n"


def speed_table(result: dict[str, Any]) -> str:
    a = result["airbench_s"]
    lines = [f"**Speed ({result['device']}, torch {result['torch']})**: {result['steps']} optimizer steps of batch "
             f"1024 on random CIFAR-shaped pictures, median of the timed runs after one warm-up run of each library.", "",
             "| what | seconds | × airbench |", "|---|---|---|", f"| airbench 0.1.8 `train94` | {a:.2f} | 1.00 |"]  # fmt: skip
    for mode, what in MODES.items():
        s = result.get(f"modforge_{mode}_s")
        lines.append(f"| {what} | {s:.2f} | {s / a:.2f} |" if s is not None else f"| {what} | not measured: the run "
                     "ended before it | |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parity", action="store_true", help="first losses vs airbench on the CPU (fp32)")
    parser.add_argument("--speed", action="store_true", help="wall time vs airbench on a CUDA device")
    parser.add_argument("--steps", type=int, default=20, help="parity: training steps compared")
    parser.add_argument("--batch", type=int, default=64, help="parity: batch size (a power of two)")
    parser.add_argument("--quick", action="store_true", help="speed: 2 epochs, one timed run (under 2 minutes)")
    parser.add_argument("--runs", type=int, default=3, help="speed: timed runs each")
    parser.add_argument("--workers", type=int, default=8, help="speed: loader workers of the shipped config")
    parser.add_argument("--write", action="store_true", help="record the figures in benchmarks/README.md")
    parser.add_argument("--profile", action="store_true", help="speed: then where each side's time goes (printed)")
    args = parser.parse_args()
    try:
        import airbench  # noqa: F401
    except ImportError as exc:
        print(f"airbench is not importable ({exc}): pip install airbench==0.1.8 (with torchvision)", file=sys.stderr)
        return 2
    mf.BACKBONES.list()  # registries loaded before timing
    sections = []
    if args.parity or not args.speed:
        torch.set_num_threads(max(1, torch.get_num_threads()))
        result = parity(steps=args.steps, batch=args.batch, pictures=args.batch * 10)
        sections.append(parity_table(result))
        print(sections[-1])
    if args.speed:
        if not torch.cuda.is_available():
            print("--speed needs a CUDA device (airbench's own code runs only there)", file=sys.stderr)
            return 2
        def measured(result: dict[str, Any]) -> None:
            if args.write:
                update_readme(f"{SECTION}-speed", speed_table(result))

        result = speed(epochs=2.0 if args.quick else 9.9, runs=1 if args.quick else args.runs, workers=args.workers,
                       measured=measured)  # fmt: skip
        sections.append(speed_table(result))
        print(sections[-1], flush=True)
    if args.write:
        for body in sections:
            update_readme(SECTION if "Parity" in body else f"{SECTION}-speed", body)
    if args.speed and args.profile:  # after the figures are recorded: a diagnosis that fails costs only itself
        try:
            print(profile())
        except Exception:  # noqa: BLE001 - print why, keep the step's result
            import traceback

            traceback.print_exc()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
