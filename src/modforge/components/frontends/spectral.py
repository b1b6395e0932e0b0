"""The base of the STFT-based frontends (``spectrogram``, ``log_mel``, ``lfcc``, ``mfcc``).

It turns the common arguments into one :class:`~.stft.STFT`: window and hop lengths default
to a duration at the injected ``sample_rate`` (25 ms / 10 ms unless the frontend says
otherwise — 400 / 160 samples at 16 kHz) and ``n_fft`` to the next power of two that holds the
window (512 at 16 kHz). :meth:`SpectralFrontend.power_spectrum` checks the waveform,
pre-emphasises it when asked and returns ``|STFT|²`` as a sequence ``[B, frames, n_fft//2+1]``.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from ..base import Frontend
from ..layouts import Layout
from .stft import STFT, PadMode, Window, next_power_of_two
from .waveform import check_waveform, pre_emphasize

__all__ = ["SpectralFrontend"]


class SpectralFrontend(Frontend):
    """Waveform ``[B, T]`` → power spectrum ``[B, frames, n_fft // 2 + 1]`` (subclasses add the rest)."""

    produces = Layout.SEQUENCE
    name: ClassVar[str] = "spectral"
    default_win_ms: ClassVar[float] = 25.0
    default_hop_ms: ClassVar[float] = 10.0

    def __init__(
        self,
        *,
        sample_rate: int,
        n_fft: int | None,
        win_length: int | None,
        hop_length: int | None,
        window: Window,
        center: bool,
        pad_mode: PadMode,
        pre_emphasis: float,
    ):
        super().__init__()
        if sample_rate <= 0:
            raise ValueError(f"sample_rate must be positive, got {sample_rate}")
        if not 0.0 <= pre_emphasis < 1.0:
            raise ValueError(f"pre_emphasis must be in [0, 1) (0 = off, 0.97 is usual), got {pre_emphasis}")
        win = win_length if win_length is not None else max(1, round(self.default_win_ms * sample_rate / 1000))
        hop = hop_length if hop_length is not None else max(1, round(self.default_hop_ms * sample_rate / 1000))
        fft = n_fft if n_fft is not None else max(2, next_power_of_two(win))
        if win_length is None:
            win = min(win, fft)
        self.sample_rate = sample_rate
        self.stft = STFT(fft, hop, win, window, center, pad_mode)
        self.n_freqs = self.stft.n_freqs
        self.min_length = self.stft.min_length
        self.pre_emphasis = float(pre_emphasis)
        self.part_name = self.name

    def power_spectrum(self, x: torch.Tensor) -> torch.Tensor:
        """``|STFT(x)|²`` as ``[B, frames, n_freqs]`` (after the input check and pre-emphasis)."""
        x = check_waveform(x, self.min_length, self.part_name)
        if self.pre_emphasis != 0.0:
            x = pre_emphasize(x, self.pre_emphasis)
        return self.stft(x)
