"""``lfcc`` — linear-frequency cepstral coefficients, as in the ASVspoof 2019/2021 LFCC baselines.

Sahidullah, Kinnunen & Hanilçi, "A comparison of features for synthetic speech detection"
(Interspeech 2015); the front-end of the ASVspoof 2019 LFCC-GMM and the ASVspoof 2021
LFCC-LCNN baselines (Wang & Yamagishi, "A comparative study on recent neural spoofing
countermeasures for synthetic speech detection", Interspeech 2021). The pipeline and the
defaults follow the LCNN baseline's front-end:

pre-emphasis (0.97) → STFT (20 ms Hamming window, 10 ms hop, 512-point DFT, zero-padded
centred frames) → power spectrum → 20 linearly spaced triangular filters over 0..fs/2 →
``log10(· + ε)`` (ε = float32 eps) → orthonormal DCT-II → 20 coefficients, the first replaced
by the log frame energy ``log10(Σ|X|²/n_fft + ε)`` → deltas ``c[t+1] − c[t−1]`` and
double-deltas (edges replicated) → 60 dimensions.
"""

from __future__ import annotations

import torch

from ...core.registries import register_frontend
from .cepstral import Deltas, dct_matrix
from .filterbanks import linear_filterbank
from .spectral import SpectralFrontend
from .stft import PadMode, Window

__all__ = ["LFCC"]

FLOAT32_EPS = float(torch.finfo(torch.float32).eps)


@register_frontend("lfcc")
class LFCC(SpectralFrontend):
    """Linear-frequency cepstral coefficients (with deltas and double-deltas by default: 60 dims).

    Args:
        n_filters: number of linearly spaced triangular filters.
        n_coeffs: cepstral coefficients kept after the DCT (≤ n_filters).
        with_energy: replace the first coefficient by the log10 frame energy (as the LCNN baseline).
        deltas: append deltas and double-deltas (3 × n_coeffs outputs).
        f_min: lowest filter edge in Hz.
        f_max: highest filter edge in Hz (default: sample_rate / 2).
        n_fft: DFT size (default: the next power of two ≥ win_length, 512 at 16 kHz).
        win_length: window length in samples (default 20 ms: 320 at 16 kHz).
        hop_length: hop between frames in samples (default 10 ms: 160 at 16 kHz).
        window: window function: 'hamming' (the baseline's), 'hann' or 'rectangular'.
        center: pad n_fft//2 samples on both sides so frame t is centred on t·hop.
        pad_mode: how center pads: 'constant' (zeros, the baseline's; any length) or 'reflect'.
        pre_emphasis: pre-emphasis coefficient (0 = off).
        sample_rate: sample rate of the input in Hz (wired by the builder).
        in_dim: input size (1 for a waveform; wired by the builder).
    """

    name = "lfcc"
    default_win_ms = 20.0
    out_dim_rule = "n_coeffs × 3 with deltas (60 by default), else n_coeffs"

    def __init__(
        self,
        n_filters: int = 20,
        n_coeffs: int = 20,
        with_energy: bool = True,
        deltas: bool = True,
        f_min: float = 0.0,
        f_max: float | None = None,
        n_fft: int | None = None,
        win_length: int | None = None,
        hop_length: int | None = None,
        window: Window = "hamming",
        center: bool = True,
        pad_mode: PadMode = "constant",
        pre_emphasis: float = 0.97,
        sample_rate: int = 16000,
        in_dim: int = 1,
    ):
        super().__init__(
            sample_rate=sample_rate,
            n_fft=n_fft,
            win_length=win_length,
            hop_length=hop_length,
            window=window,
            center=center,
            pad_mode=pad_mode,
            pre_emphasis=pre_emphasis,
        )
        self.register_buffer(
            "filterbank", linear_filterbank(self.n_freqs, sample_rate, n_filters, f_min, f_max), persistent=False
        )
        self.register_buffer("dct", dct_matrix(n_filters, n_coeffs), persistent=False)
        self.with_energy, self.with_deltas = with_energy, deltas
        self.n_fft = self.stft.n_fft
        self.eps = FLOAT32_EPS
        self.deltas = Deltas(n_coeffs, half_width=1, normalised=False)
        self.out_dim = 3 * n_coeffs if deltas else n_coeffs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        power = self.power_spectrum(x)
        coeffs = torch.matmul(torch.log10(torch.matmul(power, self.filterbank) + self.eps), self.dct)
        if self.with_energy:
            energy = torch.log10(power.sum(dim=-1, keepdim=True) / self.n_fft + self.eps)
            coeffs = torch.cat([energy, coeffs[:, :, 1:]], dim=-1)
        if not self.with_deltas:
            return coeffs
        delta = self.deltas(coeffs)
        return torch.cat([coeffs, delta, self.deltas(delta)], dim=-1)
