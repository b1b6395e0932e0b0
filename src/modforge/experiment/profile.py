"""``modforge profile``: the numbers a paper's model table carries, per part of a model.

For each part (frontend, the backbone and its stages, neck, head): parameters; the FLOPs of one
forward pass at the profiled batch (``torch.utils.flop_counter``, which counts a multiply-add as
two FLOPs — papers' "FLOPs" of a ResNet are multiply-adds, so both are given); and the activation
memory of a training forward: the bytes of every tensor autograd saves for the backward pass while
that part runs (weights excluded — they are the parameters), i.e. what the batch costs in memory
beyond the model. Then the forward latency of the whole model per engine (median of several runs
after warm-up, in eval mode, no gradients), each engine prepared as ``modforge test`` would.

The model is built from a config (its data gives the batch: ``data.batch_size`` samples of the
training split) or from a run (its ``best.pt`` weights), or — with ``input_shape`` — from the config's
model section alone, on a random batch of that shape (``num_classes`` outputs).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from ..engines import EngineError, build_engine
from ..engines.base import first_sentence

__all__ = ["EngineLatency", "ModelProfile", "PartProfile", "median_ms", "profile_config", "profile_model", "profile_run"]


@dataclasses.dataclass
class PartProfile:
    """One row: a part or a backbone stage (``depth`` 1)."""

    name: str
    depth: int
    params: int
    flops: int
    activation_bytes: int

    @property
    def macs(self) -> float:
        return self.flops / 2


@dataclasses.dataclass
class EngineLatency:
    """One engine's forward latency (milliseconds, median), or why it could not run."""

    engine: str
    median_ms: float | None
    runs: int
    note: str = ""


@dataclasses.dataclass
class ModelProfile:
    """What :func:`profile_model` measured."""

    parts: list[PartProfile]
    params: int
    trainable: int
    flops: int
    activation_bytes: int
    batch_size: int
    input_shape: list[int]
    latency: list[EngineLatency]
    threads: int = 1

    @property
    def macs(self) -> float:
        return self.flops / 2


def _rows(model: nn.Module) -> list[tuple[str, int, nn.Module]]:
    """(name, depth, module) of each part and each stage of the backbone: the children of the
    first module below the backbone that has more than one (wrappers of one module are looked
    through, e.g. a torchvision model held as ``model``)."""
    parts = getattr(model, "parts", None)
    if not isinstance(parts, nn.ModuleDict):
        return [(type(model).__name__, 0, model)]
    rows: list[tuple[str, int, nn.Module]] = []
    for name, part in parts.items():
        rows.append((name, 0, part))
        if name != "backbone":
            continue
        inner, path = part, name
        children = list(inner.named_children())
        while len(children) == 1:
            child_name, inner = children[0]
            path = f"{path}.{child_name}"
            children = list(inner.named_children())
        rows += [(f"{path}.{child}", 1, module) for child, module in children]
    return rows


def _flops_by_module(model: nn.Module, batch: dict[str, Any]) -> tuple[dict[str, int], int]:
    """Forward FLOPs per module (by ``Root.path`` name) and in all."""
    model.eval()
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(batch)
    return {name: sum(ops.values()) for name, ops in counter.get_flop_counts().items()}, counter.get_total_flops()


class _SavedBytes:
    """The bytes autograd saves for backward while each tracked module runs (weights excluded,
    each storage counted once)."""

    def __init__(self, model: nn.Module, tracked: Sequence[tuple[str, nn.Module]]):
        self.weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.seen: set[int] = set()
        self.by_name = {name: 0 for name, _ in tracked}
        self.total = 0
        self.active: list[str] = []
        self.handles = []
        for name, module in tracked:
            self.handles.append(module.register_forward_pre_hook(self._enter(name)))
            self.handles.append(module.register_forward_hook(self._leave))

    def _enter(self, name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any) -> None:
            self.active.append(name)

        return hook

    def _leave(self, module: nn.Module, args: Any, output: Any) -> None:
        self.active.pop()

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        pointer = storage.data_ptr()
        if pointer not in self.weights and pointer not in self.seen:
            self.seen.add(pointer)
            size = storage.nbytes()
            self.total += size
            for name in self.active:  # a stage's bytes count for its part too
                self.by_name[name] += size
        return tensor

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()


def _activation_bytes(model: nn.Module, batch: dict[str, Any], tracked: Sequence[tuple[str, nn.Module]]):
    model.train()
    saved = _SavedBytes(model, tracked)
    try:
        with torch.autograd.graph.saved_tensors_hooks(saved.pack, lambda tensor: tensor):
            model(batch)
    finally:
        saved.close()
    return saved.by_name, saved.total


def median_ms(run: Callable[[], Any], repeats: int, warmup: int) -> float:
    for _ in range(warmup):
        run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times)


def _latencies(model: nn.Module, batch: dict[str, Any], engines: Sequence[str], repeats: int,
               warmup: int) -> list[EngineLatency]:  # fmt: skip
    model.eval()
    inputs = {"input": batch["input"]}
    built = [(name, build_engine(name, path="--engines")) for name in engines]  # an unknown name: one error, first
    out = []
    for name, engine in built:
        try:
            runnable = engine.prepare(model, batch, train=False)
            with torch.no_grad():
                median = median_ms(lambda r=runnable: r(inputs), repeats, warmup)
            out.append(EngineLatency(name, median, repeats))
        except (EngineError, RuntimeError, ImportError, ValueError) as exc:
            out.append(EngineLatency(name, None, 0, first_sentence(exc)))
    return out


def profile_model(
    model: nn.Module,
    batch: dict[str, Any],
    *,
    engines: Sequence[str] = ("eager",),
    repeats: int = 20,
    warmup: int = 3,
) -> ModelProfile:
    """Profile ``model`` on ``batch`` (a batch dict with ``input``): parameters, forward FLOPs
    and training activation memory per part and backbone stage, and the forward latency of
    each of ``engines`` (an engine that cannot run the model gets its reason instead)."""
    rows = _rows(model)
    root = type(model).__name__
    paths = {id(module): path for path, module in model.named_modules()}
    flops_of, flops = _flops_by_module(model, batch)
    tracked = [(name, module) for name, _, module in rows]
    saved, saved_total = _activation_bytes(model, batch, tracked)
    parts = []
    for name, depth, module in rows:
        path = paths.get(id(module), "")
        key = f"{root}.{path}" if path else root
        params = sum(p.numel() for p in module.parameters())
        parts.append(PartProfile(name, depth, params, int(flops_of.get(key, 0)), saved[name]))
    parts = [p for p in parts if p.depth == 0 or p.params or p.flops or p.activation_bytes]
    latency = _latencies(model, batch, engines, repeats, warmup)
    input_tensor = batch["input"]
    return ModelProfile(
        parts=parts,
        params=sum(p.numel() for p in model.parameters()),
        trainable=sum(p.numel() for p in model.parameters() if p.requires_grad),
        flops=int(flops),
        activation_bytes=saved_total,
        batch_size=int(input_tensor.shape[0]),
        input_shape=list(input_tensor.shape[1:]),
        latency=latency,
        threads=torch.get_num_threads(),
    )




def profile_config(
    cfg: Any,
    *,
    input_shape: Sequence[int] | None = None,
    num_classes: int = 1000,
    engines: Sequence[str] = ("eager",),
    repeats: int = 20,
) -> ModelProfile:
    """Profile the model of a validated config on ``data.batch_size`` samples of its training
    split; with ``input_shape``, only the model section is built (``num_classes`` outputs) and the
    batch is random (``data.batch_size`` of that shape) — no data is read."""
    from ..model.builder import build_model
    from .runner import Experiment

    if input_shape is None:
        exp = Experiment.build(cfg)
        return profile_model(exp.model, _batch_of(exp), engines=engines, repeats=repeats)
    model = build_model(cfg, in_dim=int(input_shape[0]), num_classes=num_classes, input_shape=tuple(input_shape),
                        plugins=cfg.plugins, base_dir=str(cfg.base_dir))  # fmt: skip
    size = int((cfg.data.get("data") or {}).get("batch_size") or 1)
    batch = {"input": torch.randn(size, *input_shape, generator=torch.Generator().manual_seed(0))}
    return profile_model(model, batch, engines=engines, repeats=repeats)


def profile_run(target: Any, *, engines: Sequence[str] = ("eager",), repeats: int = 20) -> tuple[ModelProfile, Any]:
    """Profile a run's model (a run folder: its ``best.pt``, else ``last.pt``; or a checkpoint)
    on its config's batch; returns the profile and the checkpoint's path."""
    from .runner import load_trained

    exp, checkpoint = load_trained(target)
    return profile_model(exp.model, _batch_of(exp), engines=engines, repeats=repeats), checkpoint


def _batch_of(exp: Any) -> dict[str, Any]:
    """``data.batch_size`` samples of the experiment's training split, in order."""
    from ..data.loader import make_loader

    settings = dataclasses.replace(exp.loader, num_workers=0, eval_batch_size=exp.loader.batch_size)
    batch = next(iter(make_loader(exp.splits.train, settings, train=False)))
    return {"input": batch["input"]}
