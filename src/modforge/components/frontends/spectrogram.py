"""``spectrogram`` — the (log) magnitude or power STFT, ``[B, frames, n_fft // 2 + 1]``.

The plain time-frequency picture used by spectrogram CNNs (e.g. the ResNet "Spec" systems of
ASVspoof 2019). The STFT is a convolution with a windowed DFT basis (see ``stft.py``), so the
frontend is differentiable and runs under TorchScript and ONNX Runtime; it matches
``torch.stft(..., return_complex=True).abs() ** power``.
"""

from __future__ import annotations

from typing import Literal

import torch

from ...core.constraints import PositiveFloat, PositiveInt, Probability
from ...core.registries import register_frontend
from .spectral import SpectralFrontend
from .stft import PadMode, Window

__all__ = ["Spectrogram"]


@register_frontend("spectrogram")
class Spectrogram(SpectralFrontend):
    """Magnitude or power short-time Fourier transform, optionally on a log scale.

    Args:
        n_fft: DFT size (default: the next power of two ≥ win_length, 512 at 16 kHz).
        win_length: window length in samples (default 25 ms: 400 at 16 kHz).
        hop_length: hop between frames in samples (default 10 ms: 160 at 16 kHz).
        window: window function: 'hann', 'hamming' or 'rectangular'.
        center: pad n_fft//2 samples on both sides so frame t is centred on t·hop (as torch.stft).
        pad_mode: how center pads: 'reflect' (needs more than n_fft//2 samples) or 'constant'.
        power: 'magnitude' (|X|) or 'power' (|X|²).
        log: return the natural log of the spectrogram.
        log_floor: values are clamped to at least this before the log.
        pre_emphasis: pre-emphasis coefficient applied to the waveform first (0 = off).
        sample_rate: sample rate of the input in Hz (wired by the builder).
        in_dim: input size (1 for a waveform; wired by the builder).
    """

    name = "spectrogram"
    out_dim_rule = "n_fft // 2 + 1 (257 at 16 kHz with the default n_fft of 512)"

    def __init__(
        self,
        n_fft: PositiveInt | None = None,
        win_length: PositiveInt | None = None,
        hop_length: PositiveInt | None = None,
        window: Window = "hann",
        center: bool = True,
        pad_mode: PadMode = "reflect",
        power: Literal["magnitude", "power"] = "power",
        log: bool = True,
        log_floor: PositiveFloat = 1e-10,
        pre_emphasis: Probability = 0.0,
        sample_rate: PositiveInt = 16000,
        in_dim: int = 1,
    ):
        super().__init__(sample_rate, n_fft, win_length, hop_length, window, center, pad_mode, pre_emphasis)
        if power not in ("magnitude", "power"):
            raise ValueError(f"unknown power '{power}': expected 'magnitude' or 'power'")
        self.set_log_floor(log_floor)
        self.magnitude, self.log = power == "magnitude", log
        self.out_dim = self.n_freqs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        spec = self.power_spectrum(x)
        if self.magnitude:  # the clamp keeps the gradient of sqrt finite at exact zeros
            spec = torch.sqrt(spec.clamp_min(1e-30))
        if self.log:
            spec = self.floored_log(spec)
        return spec
