"""Documented, automatic conversions between layouts.

When a part's input layout differs from the previous part's output, the builder
inserts one of these — and only these — adapters. Everything else is a build-time
error naming both parts and both layouts.

=====================  ==========================================  ==================
from → to              what it does                                new ``in_dim``
=====================  ==========================================  ==================
image → vector         mean over H and W                           C
channels → vector      mean over T                                 C
sequence → vector      mean over T                                 D
sequence → channels    ``[B, T, D]`` → ``[B, D, T]``               D
channels → sequence    ``[B, C, T]`` → ``[B, T, C]``               C
sequence → image       ``[B, T, D]`` → ``[B, 1, D, T]`` (a         1
                       spectrogram seen as a one-channel image)
channels → image       ``[B, C, T]`` → ``[B, 1, C, T]``            1
waveform → channels    ``[B, T]`` → ``[B, 1, T]``                  1
=====================  ==========================================  ==================
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from ..components.layouts import Layout

__all__ = ["ADAPTERS", "Adapter", "make_adapter"]


class Adapter(nn.Module):
    """A parameter-free layout conversion (TorchScript- and ONNX-friendly)."""

    def __init__(self, source: Layout, target: Layout, op: str):
        super().__init__()
        self.source, self.target, self.op = Layout(source), Layout(target), op

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.op == "mean_hw":
            return x.mean(dim=(2, 3))
        if self.op == "mean_last":
            return x.mean(dim=-1)
        if self.op == "mean_time":
            return x.mean(dim=1)
        if self.op == "swap":
            return x.transpose(1, 2)
        if self.op == "to_image":
            return x.transpose(1, 2).unsqueeze(1)
        return x.unsqueeze(1)  # "add_channel"

    def extra_repr(self) -> str:
        return f"{self.source.value} -> {self.target.value} ({self.op})"


ADAPTERS: dict[tuple[Layout, Layout], tuple[str, str]] = {
    (Layout.IMAGE, Layout.VECTOR): ("mean_hw", "same"),
    (Layout.CHANNELS, Layout.VECTOR): ("mean_last", "same"),
    (Layout.SEQUENCE, Layout.VECTOR): ("mean_time", "same"),
    (Layout.SEQUENCE, Layout.CHANNELS): ("swap", "same"),
    (Layout.CHANNELS, Layout.SEQUENCE): ("swap", "same"),
    (Layout.SEQUENCE, Layout.IMAGE): ("to_image", "one"),
    (Layout.CHANNELS, Layout.IMAGE): ("add_channel", "one"),
    (Layout.WAVEFORM, Layout.CHANNELS): ("add_channel", "one"),
}
"""(from, to) → (operation, how ``in_dim`` changes: "same" or "one")."""


def make_adapter(source: Layout, target: Layout, in_dim: Any) -> tuple[Adapter, Any] | None:
    """An adapter from ``source`` to ``target`` and the new ``in_dim``; None when there is none."""
    entry = ADAPTERS.get((Layout(source), Layout(target)))
    if entry is None:
        return None
    op, dim_rule = entry
    return Adapter(source, target, op), (in_dim if dim_rule == "same" else 1)
