"""Pieces every engine needs: running a model on an example without side effects,
capturing what each stage receives, and the tensor-in/logits-out view used by tracing
and export."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, Literal

import torch
import torch.nn as nn

__all__ = [
    "MemoryFormat",
    "LogitsOnly",
    "apply_memory_format",
    "example_from_metadata",
    "example_input",
    "isolated",
    "stage_inputs",
    "training_mode",
]

MemoryFormat = Literal["contiguous", "channels_last"]
"""How a trainable engine lays out the model's 4-D weights (the ``memory_format`` engine option)."""


class LogitsOnly(nn.Module):
    """``model`` seen as ``input tensor -> logits`` (what tracing and ONNX export record)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)


def apply_memory_format(model: Any, memory_format: MemoryFormat) -> None:
    """Lay out ``model``'s 4-D parameters and buffers as ``memory_format``, in place.

    Why: convolutions on NHWC ("channels last") weights skip the layout reorders that
    oneDNN (CPU) and cuDNN's tensor-core kernels otherwise do on every call — on these 2 CPU
    cores a training step of the detection reference takes 23 % less time. A convolution whose
    weight is channels-last returns a channels-last output, so the images need no conversion.
    The parameters stay the same objects (``Module.to`` replaces their data), so an optimizer
    or a DDP wrapper built on them keeps working; a checkpoint stores the values, which load
    into a model of either layout. ``contiguous`` leaves the model as built."""
    if memory_format == "contiguous":
        return
    if memory_format != "channels_last":
        from .base import EngineError

        raise EngineError(f"memory_format must be 'contiguous' or 'channels_last', got {memory_format!r}")
    module = getattr(model, "module", model)  # a DDP wrapper: its module's tensors
    module.to(memory_format=torch.channels_last)


def example_input(example: Any, engine: str) -> torch.Tensor:
    """The ``input`` tensor of an example batch (a clear error when there is none)."""
    from .base import EngineError

    if isinstance(example, torch.Tensor):
        return example
    if isinstance(example, dict) and isinstance(example.get("input"), torch.Tensor):
        return example["input"]
    raise EngineError(f"engine '{engine}' needs an example batch with an 'input' tensor to prepare the model")


def example_from_metadata(metadata: dict[str, Any], batch: int = 2) -> torch.Tensor:
    """A random input of the artifact's sample shape (for tracing and export at save time)."""
    from .base import EngineError

    try:
        shape, dtype = metadata["input"]["shape"], metadata["input"].get("dtype", "float32")
    except (KeyError, TypeError):
        raise EngineError("the artifact metadata has no input shape (metadata['input']['shape'])") from None
    generator = torch.Generator().manual_seed(0)
    return torch.randn([batch, *shape], generator=generator).to(getattr(torch, dtype))


@contextlib.contextmanager
def training_mode(model: nn.Module, training: bool) -> Iterator[None]:
    """Put ``model`` in train or eval mode for the block, then back."""
    was = model.training
    model.train(training)
    try:
        yield
    finally:
        model.train(was)


@contextlib.contextmanager
def isolated(model: nn.Module) -> Iterator[None]:
    """Run warm-ups and traces without a trace on the run: global torch RNG (dropout),
    buffers (batch-norm statistics) and gradients are as before afterwards."""
    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    grads = [(p, None if p.grad is None else p.grad.detach().clone()) for p in model.parameters()]
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices):
        try:
            yield
        finally:
            with torch.no_grad():
                for buffer, saved in buffers:
                    buffer.copy_(saved)
            for param, grad in grads:
                param.grad = grad


def stage_inputs(model: nn.Module, example: dict[str, Any]) -> dict[str, Any]:
    """What each stage part of a :class:`~modforge.model.ModularModel` receives on
    ``example`` (its first positional argument), by stage name."""
    seen: dict[str, Any] = {}
    hooks = []

    def recorder(name: str) -> Callable:
        def hook(_module: nn.Module, args: tuple) -> None:
            seen.setdefault(name, args[0] if args else None)

        return hook

    for name, part in model.parts.items():
        hooks.append(part.register_forward_pre_hook(recorder(name)))
    try:
        with isolated(model), torch.no_grad():
            model(example)
    finally:
        for hook in hooks:
            hook.remove()
    return seen
