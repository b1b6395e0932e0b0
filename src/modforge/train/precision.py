"""A run's ``train.precision``: ``"32"``; mixed — ``"bf16"`` (autocast) and ``"16"`` (autocast and a
grad scaler); and ``"16-true"`` / ``"bf16-true"``: the model's weights stored in 16 bits.

Mixed precision (``"16"``, ``"bf16"``) keeps float32 weights and lets autocast cast them to 16
bits at every use — a cast kernel per weight in the forward pass and another per gradient in the
backward one, plus a grad scaler's kernels in fp16. For a small network trained in large batches
on an accelerator those launches are a large share of the host's work per step (measured on an
H200 for the airbench94 recipe: 105 launches a step, 29 of them copies — mostly these casts —
against airbench's 90 with its weights in fp16). With ``-true`` the weights themselves are 16-bit, so autocast — still on, for
the inputs and for the operations it keeps in float32 (softmax, losses) — has nothing to cast, and
the optimizer updates the 16-bit weights directly, as airbench does (``.half()``) and as
Lightning's ``"16-true"``/``"bf16-true"`` do.

Kept in float32: normalisation layers (BatchNorm, LayerNorm, GroupNorm, InstanceNorm: their
statistics lose too much in 16 bits, and PyTorch's kernels take 16-bit inputs with float32
parameters) and a model's frontends (which run in float32 under any precision: spectra overflow
16 bits). The cost: no float32 master weights — an update smaller than a weight's 16-bit spacing is
lost — and in fp16 no loss scaling (small gradients underflow: ``"16"`` keeps a scaler; bf16 has
float32's range). A weight average (``train.ema``) of 16-bit weights is kept in float32.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn as nn

__all__ = ["AUTOCAST_DTYPES", "HALF_DTYPES", "KEPT_IN_FLOAT32", "PRECISIONS", "set_up_precision", "store_weights_in"]

log = logging.getLogger("modforge.train")

PRECISIONS = ("32", "bf16", "16", "bf16-true", "16-true")
"""The values of ``train.precision``."""

HALF_DTYPES = {"16-true": torch.float16, "bf16-true": torch.bfloat16}
"""The precisions that store the weights in 16 bits, and their dtype."""

AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "16": torch.float16, **HALF_DTYPES}
"""The precisions that run under autocast, and its dtype."""

KEPT_IN_FLOAT32 = (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm)
"""Module types whose parameters and buffers stay float32 (BatchNorm and InstanceNorm share the base)."""


def store_weights_in(model: nn.Module, dtype: torch.dtype) -> int:
    """Cast ``model``'s floating parameters and buffers to ``dtype`` in place (the same Parameter
    objects: an optimizer built on them keeps them), except normalisation layers and frontends;
    returns how many tensors were cast."""
    kept: set[int] = set()
    for info in getattr(model, "stage_info", ()):
        if info.kind == "frontend":
            kept.update(id(m) for m in model.parts[info.name].modules())
    cast = 0
    for module in model.modules():
        if id(module) in kept or isinstance(module, KEPT_IN_FLOAT32):
            continue
        for parameter in module.parameters(recurse=False):
            if parameter.is_floating_point() and parameter.dtype != dtype:
                parameter.data = parameter.data.to(dtype)
                cast += 1
        for name, buffer in list(module.named_buffers(recurse=False)):
            if buffer.is_floating_point() and buffer.dtype != dtype:
                setattr(module, name, buffer.to(dtype))  # still the module's buffer (persistent or not)
                cast += 1
    return cast


def set_up_precision(model: nn.Module, optimizer: Any, precision: str,
                     device: torch.device) -> tuple[torch.amp.GradScaler | None, torch.dtype | None]:  # fmt: skip
    """``model`` made ready for ``precision`` (16-bit weights for ``-true``); the grad scaler (fp16
    mixed precision only) and the autocast dtype (None: float32). With fp16's scaler on CUDA and an
    unfused optimizer, the log says that each step then waits for the device."""
    if precision in HALF_DTYPES:
        store_weights_in(model, HALF_DTYPES[precision])
    scaler = torch.amp.GradScaler(device.type) if precision == "16" else None
    if scaler is not None and device.type == "cuda" and "fused" in getattr(optimizer, "defaults", {}) \
            and not getattr(optimizer, "_step_supports_amp_scaling", False):  # fmt: skip
        log.info("precision 16: with an unfused %s the grad scaler reads on the host whether the gradients "
                 "overflowed, a synchronisation every step; the optimizer's `fused: true` keeps that on the GPU",
                 type(optimizer).__name__)  # fmt: skip
    return scaler, AUTOCAST_DTYPES.get(precision)
