"""``mfcc`` — mel-frequency cepstral coefficients (Davis & Mermelstein, 1980), optionally with deltas.

Power spectrum → mel filterbank (see ``filterbanks.py``) → natural log with a floor →
orthonormal DCT-II → the first ``n_mfcc`` coefficients; with ``deltas``, the HTK regression
deltas over ±2 frames and their deltas are appended (3 × ``n_mfcc`` dimensions). The MFCC
systems of the ASVspoof challenges use this front-end with 20 coefficients plus deltas.
"""

from __future__ import annotations

import torch

from ...core.constraints import NonNegativeFloat, PositiveFloat, PositiveInt, Probability
from ...core.registries import register_frontend
from .cepstral import Deltas, dct_matrix
from .filterbanks import MelNorm, MelScale
from .spectral import SpectralFrontend
from .stft import PadMode, Window

__all__ = ["MFCC"]


@register_frontend("mfcc")
class MFCC(SpectralFrontend):
    """Mel-frequency cepstral coefficients.

    Args:
        n_mfcc: cepstral coefficients kept after the DCT (≤ n_mels).
        n_mels: number of mel filters.
        deltas: append deltas and double-deltas (3 × n_mfcc outputs).
        delta_width: frames on each side used by the delta regression.
        f_min: lowest filter edge in Hz.
        f_max: highest filter edge in Hz (default: sample_rate / 2).
        mel_scale: 'htk' (2595·log10(1 + f/700)) or 'slaney' (linear below 1 kHz, log above).
        norm: 'none' (peak 1 triangles) or 'slaney' (unit-area triangles).
        n_fft: DFT size (default: the next power of two ≥ win_length, 512 at 16 kHz).
        win_length: window length in samples (default 25 ms: 400 at 16 kHz).
        hop_length: hop between frames in samples (default 10 ms: 160 at 16 kHz).
        window: window function: 'hamming', 'hann' or 'rectangular'.
        center: pad n_fft//2 samples on both sides so frame t is centred on t·hop.
        pad_mode: how center pads: 'reflect' (needs more than n_fft//2 samples) or 'constant'.
        log_floor: filterbank energies are clamped to at least this before the log.
        pre_emphasis: pre-emphasis coefficient (0 = off).
        sample_rate: sample rate of the input in Hz (wired by the builder).
        in_dim: input size (1 for a waveform; wired by the builder).
    """

    name = "mfcc"
    out_dim_rule = "n_mfcc × 3 with deltas, else n_mfcc (20 by default)"

    def __init__(
        self,
        n_mfcc: PositiveInt = 20,
        n_mels: PositiveInt = 40,
        deltas: bool = False,
        delta_width: PositiveInt = 2,
        f_min: NonNegativeFloat = 0.0,
        f_max: PositiveFloat | None = None,
        mel_scale: MelScale = "htk",
        norm: MelNorm = "none",
        n_fft: PositiveInt | None = None,
        win_length: PositiveInt | None = None,
        hop_length: PositiveInt | None = None,
        window: Window = "hamming",
        center: bool = True,
        pad_mode: PadMode = "reflect",
        log_floor: PositiveFloat = 1e-10,
        pre_emphasis: Probability = 0.97,
        sample_rate: PositiveInt = 16000,
        in_dim: int = 1,
    ):
        super().__init__(sample_rate, n_fft, win_length, hop_length, window, center, pad_mode, pre_emphasis)
        self.set_log_floor(log_floor)
        self.add_mel_filterbank(n_mels, f_min, f_max, mel_scale, norm)
        self.register_buffer("dct", dct_matrix(n_mels, n_mfcc), persistent=False)
        self.with_deltas = deltas
        self.deltas = Deltas(n_mfcc, half_width=delta_width, normalised=True)
        self.out_dim = 3 * n_mfcc if deltas else n_mfcc

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        coeffs = torch.matmul(self.log_mel(x), self.dct)
        return self.deltas.appended(coeffs) if self.with_deltas else coeffs
