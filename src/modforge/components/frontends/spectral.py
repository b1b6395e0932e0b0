"""The base of the STFT-based frontends (``spectrogram``, ``log_mel``, ``lfcc``, ``mfcc``).

It owns the plumbing they share, so each frontend file is only its own features:

* the common arguments → one :class:`~.stft.STFT`: window and hop lengths default to a
  duration at the injected ``sample_rate`` (25 ms / 10 ms unless the frontend says otherwise —
  400 / 160 samples at 16 kHz) and ``n_fft`` to :meth:`SpectralFrontend.default_n_fft` of the
  window (the next power of two that holds it: 512 at 16 kHz);
* :meth:`SpectralFrontend.power_spectrum` — checks the waveform, pre-emphasises it when asked,
  zeroes padding under an optional mask and returns ``|STFT|²`` as ``[B, frames, n_fft//2+1]``;
* the floored natural log (:meth:`~SpectralFrontend.set_log_floor`, :meth:`~SpectralFrontend.floored_log`)
  and the mel filterbank with its log energies (:meth:`~SpectralFrontend.add_mel_filterbank`,
  :meth:`~SpectralFrontend.log_mel`), shared by ``spectrogram``, ``log_mel`` and ``mfcc``.

Every method is TorchScript-compatible: the torchscript engine scripts these frontends whole.
"""

from __future__ import annotations

from typing import ClassVar, Optional

import torch

from ..base import Frontend
from ..layouts import Layout
from .filterbanks import MelNorm, MelScale, mel_filterbank
from .stft import STFT, PadMode, Window, next_power_of_two
from .waveform import check_waveform, pre_emphasize

__all__ = ["SpectralFrontend"]


class SpectralFrontend(Frontend):
    """Waveform ``[B, T]`` → power spectrum ``[B, frames, n_fft // 2 + 1]`` (subclasses add the rest).

    The constructor takes the STFT settings in the order every spectral frontend declares them.
    """

    produces = Layout.SEQUENCE
    name: ClassVar[str] = "spectral"
    default_win_ms: ClassVar[float] = 25.0
    default_hop_ms: ClassVar[float] = 10.0

    def __init__(
        self,
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
        fft = n_fft if n_fft is not None else self.default_n_fft(win)
        if win_length is None:
            win = min(win, fft)
        self.sample_rate = sample_rate
        self.stft = STFT(fft, hop, win, window, center, pad_mode)
        self.n_freqs = self.stft.n_freqs
        self.min_length = self.stft.min_length
        self.pre_emphasis = float(pre_emphasis)
        self.part_name = self.name

    @classmethod
    def default_n_fft(cls, win_length: int) -> int:
        """The DFT size when none is given: the next power of two ≥ the window (at least 2)."""
        return max(2, next_power_of_two(win_length))

    def power_spectrum(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``|STFT(x)|²`` as ``[B, frames, n_freqs]`` (after the input check and pre-emphasis; a padding
        ``mask`` [B, T], True on real samples, zeroes the rest before the transform)."""
        x = check_waveform(x, self.min_length, self.part_name)
        if self.pre_emphasis != 0.0:
            x = pre_emphasize(x, self.pre_emphasis)
        if mask is not None:
            x = x * mask.to(x.dtype)
        return self.stft(x)

    def set_log_floor(self, log_floor: float) -> None:
        """Check and keep the floor :meth:`floored_log` clamps to before the log."""
        if log_floor <= 0:
            raise ValueError(f"log_floor must be positive, got {log_floor}")
        self.log_floor = float(log_floor)

    def floored_log(self, x: torch.Tensor) -> torch.Tensor:
        """``log(max(x, log_floor))``: a finite log of energies that may be zero."""
        return torch.log(x.clamp_min(self.log_floor))

    def add_mel_filterbank(
        self, n_mels: int, f_min: float, f_max: float | None, mel_scale: MelScale, norm: MelNorm
    ) -> None:
        """Register the ``[n_freqs, n_mels]`` mel filterbank that :meth:`log_mel` applies (a
        non-persistent buffer: it follows from the arguments, so checkpoints stay small)."""
        bank = mel_filterbank(self.n_freqs, self.sample_rate, n_mels, f_min, f_max, mel_scale, norm)
        self.register_buffer("filterbank", bank, persistent=False)

    def log_mel(self, x: torch.Tensor) -> torch.Tensor:
        """Floored log mel-filterbank energies of the waveform, ``[B, frames, n_mels]``."""
        return self.floored_log(torch.matmul(self.power_spectrum(x), self.filterbank))
