"""``raw`` — the waveform itself, for models that learn from samples (RawNet2, AASIST, SSL front-ends
placed in the backbone), optionally level-normalised and pre-emphasised.

Peak normalisation divides each waveform by its largest absolute sample, RMS normalisation by
its root-mean-square level; pre-emphasis is the first-order high-pass ``y[t] = x[t] − a·x[t−1]``.
"""

from __future__ import annotations

from typing import Literal

import torch

from ...core.constraints import PositiveFloat, PositiveInt, Probability
from ...core.registries import register_frontend
from ..base import Frontend
from ..layouts import Layout
from .waveform import check_waveform, normalise_level, pre_emphasize

__all__ = ["RawWaveform"]


@register_frontend("raw")
class RawWaveform(Frontend):
    """Passes the waveform through, optionally normalised and pre-emphasised.

    Args:
        normalize: per-waveform level normalisation: 'none', 'peak' (max |x| = 1) or 'rms'
            (RMS = 1).
        pre_emphasis: pre-emphasis coefficient a in y[t] = x[t] - a·x[t-1] (0 = off).
        eps: smallest level divided by, so silence stays finite.
        sample_rate: sample rate of the input in Hz (wired by the builder; unused here).
        in_dim: input size (1 for a waveform; wired by the builder).
    """

    produces = Layout.WAVEFORM
    out_dim_rule = "1 (a waveform)"

    def __init__(
        self,
        normalize: Literal["none", "peak", "rms"] = "none",
        pre_emphasis: Probability = 0.0,
        eps: PositiveFloat = 1e-8,
        sample_rate: PositiveInt = 16000,
        in_dim: int = 1,
    ):
        super().__init__()
        if normalize not in ("none", "peak", "rms"):
            raise ValueError(f"unknown normalize '{normalize}': expected 'none', 'peak' or 'rms'")
        if not 0.0 <= pre_emphasis < 1.0:
            raise ValueError(f"pre_emphasis must be in [0, 1) (0 = off, 0.97 is usual), got {pre_emphasis}")
        if eps <= 0:
            raise ValueError(f"eps must be positive, got {eps}")
        self.normalize, self.pre_emphasis, self.eps = normalize, float(pre_emphasis), float(eps)
        self.sample_rate = sample_rate
        self.out_dim = 1

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The waveform, processed; with a padding ``mask`` ([B, T], True on real samples) each
        row's level is measured on its real samples and its padding stays zero."""
        x = check_waveform(x, 1, "raw")
        if mask is not None:
            weights = mask.to(x.dtype)
            x = x * weights
            if self.normalize == "rms":
                power = (x * x).sum(dim=-1, keepdim=True) / weights.sum(dim=-1, keepdim=True).clamp_min(1.0)
                x = x / torch.sqrt(power.clamp_min(self.eps * self.eps))
            else:
                x = normalise_level(x, self.normalize, self.eps)  # a peak is not changed by zeros
            if self.pre_emphasis != 0.0:
                x = pre_emphasize(x, self.pre_emphasis) * weights
            return x
        x = normalise_level(x, self.normalize, self.eps)
        if self.pre_emphasis != 0.0:
            x = pre_emphasize(x, self.pre_emphasis)
        return x
