"""``lfcc`` — linear-frequency cepstral coefficients, as in the ASVspoof 2019/2021 LFCC baselines.

Sahidullah, Kinnunen & Hanilçi, "A comparison of features for synthetic speech detection"
(Interspeech 2015); the front-end of the ASVspoof 2021 LFCC-LCNN baseline (Wang & Yamagishi,
"A comparative study on recent neural spoofing countermeasures for synthetic speech
detection", Interspeech 2021).

Matches: asvspoof-challenge/2021 ``LA/Baseline-LFCC-LCNN`` at 4ab5666 (2021-06-01) —
``project/baseline_LA/model.py`` (``LFCC(320, 160, 1024, 16000, 20, with_energy=True,
max_freq=0.5)``, the same for DF and PA) and ``sandbox/util_frontend.py`` (``LFCC``) — whose
released LCNN weights were trained on these features:

pre-emphasis (0.97) → STFT (20 ms periodic Hamming window centred in a 1024-point DFT,
10 ms hop, frames centred by zero padding) → power spectrum, of which the baseline keeps the
lower half of the bins (``max_freq=0.5``: ``int(0.5 · 513) = 256`` bins, 0 to 3984.4 Hz) →
20 linearly spaced triangular filters spanning those bins → ``log10(· + ε)`` (ε = float32
eps) → orthonormal DCT-II → 20 coefficients, the first replaced by the log energy of the
kept bins ``log10(Σ|X|²/n_fft + ε)`` → deltas ``c[t+1] − c[t−1]`` and double-deltas (edges
replicated) → 60 dimensions. (The baseline gives its kept bins the frequencies
``linspace(0, 4000, 256)`` rather than ``k · 15.625`` Hz; spacing the filters evenly over
the same bins is the same filterbank.)

Remaining differences: the STFT is a DFT computed as a convolution in float32 and the
filterbank is designed in float64 (the reference: ``torch.stft`` and a float32 ``trimf``),
so values agree to float32 rounding; ``f_min`` > 0 keeps the bins from ``f_min`` up (the
baseline's ``min_freq`` also re-maps their frequencies). At another sample rate the window,
hop and DFT sizes scale with it (20 ms, 10 ms, twice the window's power of two).
"""

from __future__ import annotations

import torch

from ...core.constraints import NonNegativeFloat, PositiveFloat, PositiveInt, Probability
from ...core.registries import register_frontend
from .cepstral import Deltas, dct_matrix
from .filterbanks import linear_filterbank
from .spectral import SpectralFrontend
from .stft import PadMode, Window, next_power_of_two

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
        f_min: lowest filter edge in Hz; lower bins are left out of the energy too.
        f_max: highest filter edge in Hz; higher bins are left out of the energy too. Default:
            the baseline's ``max_freq=0.5`` — the lowest ``int((n_fft/2 + 1) / 2)`` bins, the top
            one's frequency as the edge (3984.375 Hz at the defaults); ``sample_rate / 2``
            keeps the whole spectrum.
        n_fft: DFT size (default: twice the next power of two ≥ win_length, the baseline's
            1024 at 16 kHz).
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
        n_filters: PositiveInt = 20,
        n_coeffs: PositiveInt = 20,
        with_energy: bool = True,
        deltas: bool = True,
        f_min: NonNegativeFloat = 0.0,
        f_max: PositiveFloat | None = None,
        n_fft: PositiveInt | None = None,
        win_length: PositiveInt | None = None,
        hop_length: PositiveInt | None = None,
        window: Window = "hamming",
        center: bool = True,
        pad_mode: PadMode = "constant",
        pre_emphasis: Probability = 0.97,
        sample_rate: PositiveInt = 16000,
        in_dim: int = 1,
    ):
        super().__init__(sample_rate, n_fft, win_length, hop_length, window, center, pad_mode, pre_emphasis)
        fft = self.stft.n_fft
        if f_max is None:  # the baseline's max_freq = 0.5: the lower half of the bins
            f_max = (int(0.5 * self.n_freqs) - 1) * sample_rate / fft
        bank = linear_filterbank(self.n_freqs, sample_rate, n_filters, f_min, f_max)
        bin_hz = [k * sample_rate / fft for k in range(self.n_freqs)]
        self.low_bin = next(k for k, hz in enumerate(bin_hz) if hz >= f_min)
        self.high_bin = max(k for k, hz in enumerate(bin_hz) if hz <= f_max) + 1  # bins [low, high) are kept
        self.register_buffer("filterbank", bank[self.low_bin : self.high_bin].contiguous(), persistent=False)
        self.register_buffer("dct", dct_matrix(n_filters, n_coeffs), persistent=False)
        self.with_energy, self.with_deltas = with_energy, deltas
        self.n_fft = self.stft.n_fft
        self.eps = FLOAT32_EPS
        self.deltas = Deltas(n_coeffs, half_width=1, normalised=False)
        self.out_dim = 3 * n_coeffs if deltas else n_coeffs

    @classmethod
    def default_n_fft(cls, win_length: int) -> int:
        """The baseline's DFT size: twice the next power of two ≥ the window (1024 for its 320 samples)."""
        return 2 * next_power_of_two(win_length)

    @property
    def handles_mask(self) -> bool:
        """Padded rows give what the file alone gives unless frames are centred with reflected
        edges (the reflection of a padded row's end is padding)."""
        return not (self.stft.center and self.stft.pad_mode == "reflect")

    def output_mask(self, mask: torch.Tensor) -> torch.Tensor:
        """The frames of each row that its file alone has (``[B, T]`` samples → ``[B, frames]``)."""
        length = mask.sum(dim=1)
        stft = self.stft
        count = 1 + (length // stft.hop_length if stft.center else (length - stft.n_fft) // stft.hop_length)
        frames = stft.frames(mask.shape[1])
        return torch.arange(frames, device=mask.device).unsqueeze(0) < count.unsqueeze(1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Features ``[B, frames, D]``; with a padding ``mask`` [B, T] (True on real samples),
        each row's real frames equal those of its file alone (padding is kept at zero after
        pre-emphasis, deltas replicate each row's own last frame)."""
        power = self.power_spectrum(x, mask)[:, :, self.low_bin : self.high_bin]
        coeffs = torch.matmul(torch.log10(torch.matmul(power, self.filterbank) + self.eps), self.dct)
        if self.with_energy:
            energy = torch.log10(power.sum(dim=-1, keepdim=True) / self.n_fft + self.eps)
            coeffs = torch.cat([energy, coeffs[:, :, 1:]], dim=-1)
        if not self.with_deltas:
            return coeffs
        return self.deltas.appended(coeffs, None if mask is None else self.output_mask(mask))
