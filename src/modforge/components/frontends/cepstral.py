"""Cepstral post-processing shared by ``lfcc`` and ``mfcc``: the DCT-II and delta features.

* :func:`dct_matrix` — the orthonormal DCT-II as a ``[n_in, n_out]`` matrix (the first
  ``n_out`` coefficients), so ``log_fbank @ dct`` equals ``scipy.fft.dct(log_fbank,
  norm="ortho")[..., :n_out]``.
* :class:`Deltas` — time derivatives of a feature sequence ``[B, T, D]`` by linear regression
  over ``±N`` frames, ``d_t = Σ_n n·(c_{t+n} − c_{t−n}) / (2 Σ_n n²)`` (HTK; edges
  replicated), or unnormalised, ``Σ_n n·(c_{t+n} − c_{t−n})`` — with ``N = 1`` that is the
  ``c_{t+1} − c_{t−1}`` of the ASVspoof 2021 LFCC-LCNN baseline. Implemented as a depthwise
  convolution so every engine runs it; :meth:`Deltas.appended` stacks a sequence with its
  deltas and double-deltas.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["Deltas", "dct_matrix", "hold_last_frame"]


def hold_last_frame(x: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
    """``x`` [B, T, D] with every frame past a row's last real one (``frames`` [B, T], True on
    real frames) replaced by that last real frame: a padded row's deltas then replicate its own
    edge, as the row alone would."""
    count = frames.sum(dim=1).clamp_min(1)
    index = torch.minimum(torch.arange(x.shape[1], device=x.device).unsqueeze(0), (count - 1).unsqueeze(1))
    return torch.gather(x, 1, index.unsqueeze(-1).expand(-1, -1, x.shape[2]))


def dct_matrix(n_in: int, n_out: int) -> torch.Tensor:
    """Orthonormal DCT-II basis ``[n_in, n_out]``: ``C[n, k] = s_k·cos(π k (2n + 1) / (2 n_in))``,
    ``s_0 = √(1/n_in)``, ``s_k = √(2/n_in)``.

    Raises:
        ValueError: ``n_out`` outside ``1..n_in``.
    """
    if not 1 <= n_out <= n_in:
        raise ValueError(f"the number of cepstral coefficients must be between 1 and {n_in}, got {n_out}")
    n = torch.arange(n_in, dtype=torch.float64)[:, None]
    k = torch.arange(n_out, dtype=torch.float64)[None, :]
    basis = torch.cos(math.pi * k * (2 * n + 1) / (2 * n_in)) * math.sqrt(2.0 / n_in)
    basis[:, 0] = 1.0 / math.sqrt(n_in)
    return basis.float()


class Deltas(nn.Module):
    """Delta features of ``[B, T, D]`` along time (same shape out).

    Args:
        dim: feature size ``D``.
        half_width: ``N``, the frames on each side used by the regression.
        normalised: divide by ``2 Σ n²`` (HTK/torchaudio); ``False`` keeps the plain weighted
            difference (the LFCC-LCNN baseline's ``c[t+1] − c[t−1]``).
    """

    def __init__(self, dim: int, half_width: int = 2, normalised: bool = True):
        super().__init__()
        if half_width < 1:
            raise ValueError(f"the delta half-width must be at least 1, got {half_width}")
        offsets = torch.arange(-half_width, half_width + 1, dtype=torch.float64)
        scale = 2.0 * float((offsets[half_width + 1 :] ** 2).sum()) if normalised else 1.0
        kernel = (offsets / scale).float().expand(dim, 1, -1).contiguous()  # [D, 1, 2N + 1]
        self.register_buffer("kernel", kernel, persistent=False)
        self.dim, self.half_width = dim, half_width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.pad(x.transpose(1, 2), (self.half_width, self.half_width), mode="replicate")
        return F.conv1d(y, self.kernel, groups=self.dim).transpose(1, 2)

    def appended(self, x: torch.Tensor, frames: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``x`` with its deltas and double-deltas appended, ``[B, T, 3D]`` (the cepstral
        frontends' ``deltas=True`` output). With ``frames`` ([B, T], True on each row's real
        frames) each row's last real frame is held before each regression, so a padded row's
        deltas replicate its own edge (:func:`hold_last_frame`)."""
        first = x if frames is None else hold_last_frame(x, frames)
        delta = self.forward(first)
        second = delta if frames is None else hold_last_frame(delta, frames)
        return torch.cat([x, delta, self.forward(second)], dim=-1)
