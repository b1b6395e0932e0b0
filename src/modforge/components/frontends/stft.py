"""The short-time Fourier transform as a strided 1-D convolution with a fixed, windowed DFT basis.

``torch.stft`` returns complex tensors and is not exported by every ONNX path; a convolution
whose kernels are the real and imaginary parts of the windowed DFT (``w[n]·cos(2πkn/N)`` and
``-w[n]·sin(2πkn/N)``) computes exactly the same one-sided spectrum with an operation that
every engine runs (eager, TorchScript, ONNX Runtime), is differentiable with respect to the
waveform, and follows the input's device (the basis is a non-persistent buffer: it depends
only on the arguments, so checkpoints stay small).

Framing follows ``torch.stft``/librosa: with ``center=True`` the signal is padded by
``n_fft // 2`` on both sides and frame ``t`` is centred on sample ``t·hop``; a window shorter
than ``n_fft`` sits in the middle of the ``n_fft`` frame (zero taps are dropped from the
kernel, which only saves work).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["STFT", "PadMode", "Window", "make_window", "next_power_of_two"]

Window = Literal["hann", "hamming", "rectangular"]
PadMode = Literal["reflect", "constant"]


def next_power_of_two(n: int) -> int:
    """The smallest power of two ≥ ``n`` (≥ 1)."""
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


def make_window(name: str, length: int) -> torch.Tensor:
    """A periodic window of ``length`` samples in float64 (as ``torch.hann_window(length)`` etc.)."""
    if name == "hann":
        return torch.hann_window(length, periodic=True, dtype=torch.float64)
    if name == "hamming":
        return torch.hamming_window(length, periodic=True, dtype=torch.float64)
    if name == "rectangular":
        return torch.ones(length, dtype=torch.float64)
    raise ValueError(f"unknown window '{name}': expected one of 'hann', 'hamming', 'rectangular'")


class STFT(nn.Module):
    """Power spectrum ``|STFT|²`` of a waveform batch, ``[B, T]`` → ``[B, frames, n_fft // 2 + 1]``.

    Frames: ``1 + T // hop_length`` with ``center=True``, ``1 + (T - n_fft) // hop_length`` without.

    Args:
        n_fft: DFT size; ``n_fft // 2 + 1`` frequency bins.
        hop_length: samples between frame starts.
        win_length: window length (≤ ``n_fft``), centred in the frame.
        window: window function (periodic, as ``torch.hann_window``).
        center: pad ``n_fft // 2`` samples on both sides so frames are centred on ``t·hop``.
        pad_mode: how ``center`` pads: 'reflect' (as ``torch.stft``; needs more than
            ``n_fft // 2`` samples) or 'constant' (zeros; any length).
    """

    def __init__(
        self,
        n_fft: int,
        hop_length: int,
        win_length: int,
        window: Window = "hann",
        center: bool = True,
        pad_mode: PadMode = "reflect",
    ):
        super().__init__()
        if n_fft < 2:
            raise ValueError(f"n_fft must be at least 2, got {n_fft}")
        if not 1 <= win_length <= n_fft:
            raise ValueError(f"win_length must be between 1 and n_fft={n_fft}, got {win_length}")
        if hop_length < 1:
            raise ValueError(f"hop_length must be at least 1, got {hop_length}")
        if pad_mode not in ("reflect", "constant"):
            raise ValueError(f"unknown pad_mode '{pad_mode}': expected 'reflect' or 'constant'")
        self.n_fft, self.hop_length, self.win_length = n_fft, hop_length, win_length
        self.center, self.pad_mode = center, pad_mode
        self.n_freqs = n_fft // 2 + 1
        # the window occupies taps [left, left + win_length) of the n_fft frame (torch.stft's placement)
        self.left = (n_fft - win_length) // 2
        self.right = n_fft - win_length - self.left
        taps = torch.arange(self.left, self.left + win_length, dtype=torch.float64)
        bins = torch.arange(self.n_freqs, dtype=torch.float64)
        # (k·n mod N) keeps the angle small, so the float64 basis is exact before the cast
        angle = (2 * math.pi / n_fft) * torch.remainder(bins[:, None] * taps[None, :], n_fft)
        w = make_window(window, win_length)
        basis = torch.cat([w * torch.cos(angle), -w * torch.sin(angle)])  # [2F, win_length]
        self.register_buffer("basis", basis.unsqueeze(1).float(), persistent=False)

    @property
    def min_length(self) -> int:
        """The fewest samples that give one frame."""
        if not self.center:
            return self.n_fft
        return self.n_fft // 2 + 1 if self.pad_mode == "reflect" else 1

    def frames(self, length: int) -> int:
        """Number of frames for a waveform of ``length`` samples."""
        return 1 + (length // self.hop_length if self.center else (length - self.n_fft) // self.hop_length)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.unsqueeze(1)  # [B, 1, T]
        if self.center:
            pad = self.n_fft // 2
            y = F.pad(y, (pad, pad), mode=self.pad_mode)
        # drop the zero taps around a window shorter than n_fft: frame t starts at t·hop + left
        if self.right > 0:
            y = y[:, :, self.left : y.shape[-1] - self.right]
        elif self.left > 0:
            y = y[:, :, self.left :]
        spec = F.conv1d(y, self.basis, stride=self.hop_length)  # [B, 2F, frames]
        real, imag = spec[:, : self.n_freqs], spec[:, self.n_freqs :]
        return (real * real + imag * imag).transpose(1, 2)
