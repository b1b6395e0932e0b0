"""``sinc`` — a learnable band-pass filterbank on the raw waveform (SincNet / RawNet2 / AASIST first layer).

Ravanelli & Bengio, "Speaker recognition from raw waveform with SincNet" (SLT 2018): each of
the ``out_channels`` kernels is a windowed ideal band-pass filter whose only parameters are a
low cut-off and a band width,

    h[n] = (sin(2π f₂ n / fs) − sin(2π f₁ n / fs)) / (π n),   h[0] = 2 (f₂ − f₁) / fs,

times a Hamming window, with ``f₁ = min_low_hz + |low|`` and ``f₂ = clamp(f₁ + min_band_hz +
|band|, min_low_hz, fs/2)`` (the SincNet parametrisation), initialised with band edges equally
spaced on the mel scale between 30 Hz and ``fs/2 − (min_low_hz + min_band_hz)``. The gain is
the unit-passband one of RawNet2's SincConv (Tak et al., "End-to-end anti-spoofing with
RawNet2", ICASSP 2021). RawNet2 uses 20 filters of 1024 (→1025) taps, AASIST (Jung et al.,
ICASSP 2022) 70 filters of 128 (→129) taps, both with stride 1 and no padding, followed by
``|·|``, max-pooling over 3 samples, batch norm and SELU — the filter count, length and
post-processing defaults here are RawNet2's. The band edges are SincNet's (30 Hz up, with the
``min_low_hz``/``min_band_hz`` offsets), not RawNet2/AASIST's fixed 0 – fs/2 mel spacing: with
``learnable=False`` the cut-offs stay at their SincNet initial values. (``rawnet2`` and
``aasist`` build their own fixed front ends on waveform input, exactly as published.)
Output: channels ``[B, out_channels, T']``.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ...core.constraints import NonNegativeFloat, PositiveInt
from ...core.registries import register_frontend
from ..base import Frontend
from ..common import activation
from ..layouts import Layout
from .filterbanks import hz_to_mel, mel_to_hz
from .waveform import check_waveform

__all__ = ["SincConv", "SincFrontend"]


class SincConv(nn.Module):
    """The sinc band-pass convolution, ``[B, T]`` → ``[B, out_channels, T']``.

    Args:
        out_channels: number of band-pass filters.
        kernel_size: taps per filter (an even size is made odd by adding one, as in SincNet).
        sample_rate: sample rate in Hz.
        stride: convolution stride.
        padding: zero padding on both sides.
        min_low_hz: smallest low cut-off in Hz.
        min_band_hz: smallest band width in Hz.
        learnable: learn the cut-offs (else they stay at their mel-spaced initial values).
    """

    def __init__(
        self,
        out_channels: int,
        kernel_size: int,
        sample_rate: int,
        stride: PositiveInt = 1,
        padding: int = 0,
        min_low_hz: NonNegativeFloat = 50.0,
        min_band_hz: NonNegativeFloat = 50.0,
        learnable: bool = True,
    ):
        super().__init__()
        if out_channels < 1 or kernel_size < 1 or stride < 1 or padding < 0:
            raise ValueError(
                "out_channels, kernel_size and stride must be at least 1 and padding at least 0, got "
                f"{out_channels}, {kernel_size}, {stride}, {padding}"
            )
        high_hz = sample_rate / 2 - (min_low_hz + min_band_hz)
        if min_low_hz < 0 or min_band_hz < 0 or high_hz <= 30.0:
            raise ValueError(
                f"min_low_hz + min_band_hz ({min_low_hz:g} + {min_band_hz:g}) must leave room below the "
                f"Nyquist frequency {sample_rate / 2:g} Hz"
            )
        self.kernel_size = kernel_size + 1 if kernel_size % 2 == 0 else kernel_size
        self.out_channels, self.sample_rate, self.stride, self.padding = out_channels, sample_rate, stride, padding
        self.min_low_hz, self.min_band_hz = float(min_low_hz), float(min_band_hz)
        edges = mel_to_hz(np.linspace(hz_to_mel(30.0), hz_to_mel(high_hz), out_channels + 1))
        low = torch.from_numpy(edges[:-1]).float().view(-1, 1)
        band = torch.from_numpy(np.diff(edges)).float().view(-1, 1)
        if learnable:
            self.low_hz = nn.Parameter(low)
            self.band_hz = nn.Parameter(band)
        else:
            self.register_buffer("low_hz", low, persistent=False)
            self.register_buffer("band_hz", band, persistent=False)
        half = (self.kernel_size - 1) // 2
        n = torch.arange(-half, half + 1, dtype=torch.float64)
        self.register_buffer("centre", (n == 0).view(1, -1), persistent=False)
        n_safe = torch.where(n == 0, torch.ones_like(n), n)
        self.register_buffer("omega", (2 * math.pi * n / sample_rate).float().view(1, -1), persistent=False)
        self.register_buffer("pi_n", (math.pi * n_safe).float().view(1, -1), persistent=False)
        window = torch.hamming_window(self.kernel_size, periodic=False, dtype=torch.float64)
        self.register_buffer("window", window.float().view(1, -1), persistent=False)

    def cutoffs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The low and high cut-offs in Hz, ``[out_channels, 1]`` each."""
        low = self.min_low_hz + self.low_hz.abs()
        high = torch.clamp(low + self.min_band_hz + self.band_hz.abs(), self.min_low_hz, self.sample_rate / 2)
        return low, high

    def filters(self) -> torch.Tensor:
        """The current kernels, ``[out_channels, 1, kernel_size]``."""
        low, high = self.cutoffs()
        side = (torch.sin(high * self.omega) - torch.sin(low * self.omega)) / self.pi_n
        centre = 2.0 * (high - low) / self.sample_rate
        band_pass = torch.where(self.centre, centre, side) * self.window
        return band_pass.unsqueeze(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv1d(x.unsqueeze(1), self.filters(), stride=self.stride, padding=self.padding)


@register_frontend("sinc")
class SincFrontend(Frontend):
    """Learnable sinc band-pass filters on the waveform, then |·|, max-pool, batch norm and activation.

    Args:
        out_channels: number of band-pass filters (20 in RawNet2, 70 in AASIST).
        kernel_size: taps per filter; even sizes become odd (+1), as in RawNet2/AASIST (1024 → 1025, 128 → 129).
        stride: convolution stride.
        padding: 'valid' (no padding, as RawNet2/AASIST; needs kernel_size samples) or 'same'
            (kernel_size // 2 zeros on both sides).
        min_low_hz: smallest low cut-off in Hz.
        min_band_hz: smallest band width in Hz.
        learnable: learn the cut-offs (False: fixed mel-spaced filters, as RawNet2/AASIST train them).
        use_abs: take the absolute value of the filter outputs (RawNet2/AASIST).
        max_pool: max-pooling size over time after the filters (1 = none; 3 in RawNet2/AASIST).
        batch_norm: batch-normalise the channels.
        activation: activation after the batch norm: 'selu' (RawNet2/AASIST), 'relu', 'leaky_relu',
            'gelu', 'silu', 'tanh' or 'none'.
        sample_rate: sample rate of the input in Hz (wired by the builder).
        in_dim: input size (1 for a waveform; wired by the builder).
    """

    produces = Layout.CHANNELS
    out_dim_rule = "out_channels"

    def __init__(
        self,
        out_channels: PositiveInt = 20,
        kernel_size: PositiveInt = 1025,
        stride: PositiveInt = 1,
        padding: Literal["valid", "same"] = "valid",
        min_low_hz: NonNegativeFloat = 50.0,
        min_band_hz: NonNegativeFloat = 50.0,
        learnable: bool = True,
        use_abs: bool = True,
        max_pool: PositiveInt = 3,
        batch_norm: bool = True,
        activation: Literal["selu", "relu", "leaky_relu", "gelu", "silu", "tanh", "none"] = "selu",
        sample_rate: PositiveInt = 16000,
        in_dim: int = 1,
    ):
        super().__init__()
        if padding not in ("valid", "same"):
            raise ValueError(f"unknown padding '{padding}': expected 'valid' or 'same'")
        if max_pool < 1:
            raise ValueError(f"max_pool must be at least 1 (1 = no pooling), got {max_pool}")
        odd = kernel_size + 1 if kernel_size % 2 == 0 else kernel_size
        pad = odd // 2 if padding == "same" else 0
        self.sinc = SincConv(out_channels, kernel_size, sample_rate, stride, pad, min_low_hz, min_band_hz, learnable)
        self.use_abs, self.max_pool = use_abs, max_pool
        self.norm = nn.BatchNorm1d(out_channels) if batch_norm else nn.Identity()
        self.act = _activation(activation)
        # one output sample after pooling needs (max_pool - 1)·stride + kernel samples of the padded input
        self.min_length = max(1, (max_pool - 1) * stride + self.sinc.kernel_size - 2 * pad)
        self.out_dim = out_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.sinc(check_waveform(x, self.min_length, "sinc"))
        if self.use_abs:
            y = y.abs()
        if self.max_pool > 1:
            y = F.max_pool1d(y, self.max_pool)
        return self.act(self.norm(y))


def _activation(name: str) -> nn.Module:
    if name == "none":
        return nn.Identity()
    if name == "selu":
        return nn.SELU()
    return activation(name)  # type: ignore[arg-type]
