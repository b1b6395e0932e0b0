"""The part contract: base classes for frontends, backbones, necks, heads and losses.

Every part is an ``nn.Module``.  What makes it a *modforge* part is a little metadata the
builder reads:

* ``accepts`` — the input layouts the part takes (:class:`~.layouts.Layout`; empty means
  any), and ``produces`` — the layout of its output (``None``: the same as its input).
  ``produces`` may be overridden per instance when an argument changes it (a backbone
  built with ``features_only=True`` produces ``multiscale``).
* ``out_dim`` — the size of the output (an int, or a list of channel counts for
  multiscale). Set it in ``__init__``; when a part does not, the builder measures it once
  with a dry run, so a plain ``nn.Module`` works too. ``out_dim_rule`` says in words how
  it follows from the arguments (shown by ``modforge describe``).
* the part receives the previous part's ``out_dim`` as ``in_dim`` and, when it asks for
  it, the actual input layout as ``in_layout``.

None of these base classes is required — a user's plain module works — but they give
the conveniences documented here.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, ClassVar

import torch
import torch.nn as nn

from .layouts import Layout

__all__ = ["Backbone", "Frontend", "Head", "Loss", "Neck", "Part", "flat_grads", "flat_params"]


class Part(nn.Module):
    """Common base of all parts: layout metadata and ``out_dim``."""

    accepts: ClassVar[tuple[Layout, ...]] = ()
    produces: Layout | None = None
    out_dim_rule: ClassVar[str] = ""
    out_dim: Any = None
    unsupported_engines: ClassVar[dict[str, str]] = {}  # engine name → why this part cannot run under it
    # builder metadata, not model state: TorchScript leaves them out of scripted parts
    __jit_ignored_attributes__: ClassVar[list[str]] = [
        "accepts", "produces", "out_dim_rule", "out_dim", "unsupported_engines"
    ]


class Frontend(Part):
    """Turns raw input (usually a waveform) into features; first in the chain."""

    accepts: ClassVar[tuple[Layout, ...]] = (Layout.WAVEFORM,)


class Neck(Part):
    """Sits between backbone and head: pooling, projection, multi-scale fusion."""


class Head(Part):
    """Maps an embedding to the task's outputs (logits); receives ``num_classes``."""

    accepts: ClassVar[tuple[Layout, ...]] = (Layout.VECTOR,)
    produces = Layout.VECTOR


class Loss(Part):
    """A training objective computed from the model's outputs.

    The model calls ``loss(batch[input_key], batch[target_key])``; the result must be a
    scalar tensor. ``input_key`` is ``"logits"`` for classification losses and
    ``"embedding"`` for losses that own their classifier (margin losses).
    """

    input_key: ClassVar[str] = "logits"
    target_key: ClassVar[str] = "label"
    accepts: ClassVar[tuple[Layout, ...]] = (Layout.VECTOR,)


@functools.cache
def _takes_returnt(cls: type) -> bool:
    """Whether ``cls.forward`` has a ``returnt`` parameter (read once per class)."""
    try:
        return "returnt" in inspect.signature(cls.forward).parameters
    except (TypeError, ValueError):
        return False


def flat_params(module: nn.Module) -> torch.Tensor:
    """All parameters of ``module`` concatenated into one vector (a copy)."""
    params = [p.detach().reshape(-1) for p in module.parameters()]
    return torch.cat(params) if params else torch.zeros(0)


def flat_grads(module: nn.Module) -> torch.Tensor:
    """All gradients concatenated like :func:`flat_params`; zeros where there is none."""
    grads = [(p.grad.detach() if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in module.parameters()]
    return torch.cat(grads) if grads else torch.zeros(0)


def _assign_flat(module: nn.Module, vector: torch.Tensor, *, grads: bool) -> None:
    params = list(module.parameters())
    total = sum(p.numel() for p in params)
    if vector.dim() != 1 or vector.numel() != total:
        what = "gradient" if grads else "parameter"
        raise ValueError(f"expected a flat {what} vector of {total} values, got shape {tuple(vector.shape)}")
    offset = 0
    with torch.no_grad():
        for p in params:
            chunk = vector[offset : offset + p.numel()].view_as(p).to(device=p.device, dtype=p.dtype)
            if grads:
                p.grad = chunk.clone()
            else:
                p.copy_(chunk)
            offset += p.numel()


class Backbone(Part):
    """The feature extractor. Adds, for every subclass, without extra code:

    * :meth:`features` — the features before any classifier;
    * :meth:`forward_intermediates` — the output of every top-level block (children in
      call order; the members of an ``nn.ModuleList`` count as blocks), for methods that
      use all layers (TwF-style distillation, ``returnt="full"``);
    * :meth:`get_params`/:meth:`set_params`/:meth:`get_grads`/:meth:`set_grads` — flat
      vectors, for EWC/GEM-style methods.
    """

    def features(self, x: Any) -> Any:
        """The features before the classifier: ``self(x, returnt="features")`` for a backbone
        whose ``forward`` takes ``returnt`` (Mammoth style: it owns its classifier, so its plain
        output is the logits), else its output (a backbone without a classifier)."""
        if _takes_returnt(type(self)):
            return self(x, returnt="features")
        return self(x)

    def intermediate_modules(self) -> list[nn.Module]:
        """The blocks whose outputs :meth:`forward_intermediates` reports (override to choose)."""
        blocks: list[nn.Module] = []
        for child in self.children():
            if isinstance(child, nn.ModuleList):
                blocks.extend(child)
            else:
                blocks.append(child)
        return blocks

    def forward_intermediates(self, x: Any) -> tuple[Any, list[torch.Tensor]]:
        """``(output, [block outputs in call order])`` from one forward pass."""
        captured: list[torch.Tensor] = []

        def hook(_module: nn.Module, _inputs: Any, output: Any) -> None:
            if isinstance(output, torch.Tensor):
                captured.append(output)

        handles = [m.register_forward_hook(hook) for m in self.intermediate_modules()]
        try:
            out = self(x)
        finally:
            for handle in handles:
                handle.remove()
        return out, captured

    def get_params(self) -> torch.Tensor:
        """Every parameter, concatenated into one flat vector."""
        return flat_params(self)

    def set_params(self, vector: torch.Tensor) -> None:
        """Overwrite every parameter from a flat vector (the inverse of :meth:`get_params`)."""
        _assign_flat(self, vector, grads=False)

    def get_grads(self) -> torch.Tensor:
        """Every gradient as one flat vector; zeros for parameters without a gradient."""
        return flat_grads(self)

    def set_grads(self, vector: torch.Tensor) -> None:
        """Set every parameter's ``.grad`` from a flat vector."""
        _assign_flat(self, vector, grads=True)
