"""``log_mel`` — log mel filterbank energies, ``[B, frames, n_mels]``.

The power spectrum is weighted by triangular filters equally spaced on the mel scale (HTK or
Slaney, see ``filterbanks.py``) and the natural log is taken with a floor — the standard
input of spectrogram models for speech (e.g. the "LFB/LMS" features of ASVspoof systems).
"""

from __future__ import annotations

import torch

from ...core.constraints import NonNegativeFloat, PositiveFloat, PositiveInt, Probability
from ...core.registries import register_frontend
from .filterbanks import MelNorm, MelScale
from .spectral import SpectralFrontend
from .stft import PadMode, Window

__all__ = ["LogMel"]


@register_frontend("log_mel")
class LogMel(SpectralFrontend):
    """Log mel-filterbank energies of the power spectrum.

    Args:
        n_mels: number of mel filters (the output size).
        f_min: lowest filter edge in Hz.
        f_max: highest filter edge in Hz (default: sample_rate / 2).
        mel_scale: 'htk' (2595·log10(1 + f/700)) or 'slaney' (linear below 1 kHz, log above).
        norm: 'none' (peak 1 triangles) or 'slaney' (unit-area triangles).
        n_fft: DFT size (default: the next power of two ≥ win_length, 512 at 16 kHz).
        win_length: window length in samples (default 25 ms: 400 at 16 kHz).
        hop_length: hop between frames in samples (default 10 ms: 160 at 16 kHz).
        window: window function: 'hann', 'hamming' or 'rectangular'.
        center: pad n_fft//2 samples on both sides so frame t is centred on t·hop (as torch.stft).
        pad_mode: how center pads: 'reflect' (needs more than n_fft//2 samples) or 'constant'.
        log_floor: filterbank energies are clamped to at least this before the log.
        pre_emphasis: pre-emphasis coefficient applied to the waveform first (0 = off).
        sample_rate: sample rate of the input in Hz (wired by the builder).
        in_dim: input size (1 for a waveform; wired by the builder).
    """

    name = "log_mel"
    out_dim_rule = "n_mels"

    def __init__(
        self,
        n_mels: PositiveInt = 80,
        f_min: NonNegativeFloat = 0.0,
        f_max: PositiveFloat | None = None,
        mel_scale: MelScale = "htk",
        norm: MelNorm = "none",
        n_fft: PositiveInt | None = None,
        win_length: PositiveInt | None = None,
        hop_length: PositiveInt | None = None,
        window: Window = "hann",
        center: bool = True,
        pad_mode: PadMode = "reflect",
        log_floor: PositiveFloat = 1e-10,
        pre_emphasis: Probability = 0.0,
        sample_rate: PositiveInt = 16000,
        in_dim: int = 1,
    ):
        super().__init__(sample_rate, n_fft, win_length, hop_length, window, center, pad_mode, pre_emphasis)
        self.set_log_floor(log_floor)
        self.add_mel_filterbank(n_mels, f_min, f_max, mel_scale, norm)
        self.out_dim = n_mels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.log_mel(x)
