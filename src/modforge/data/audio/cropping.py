"""Fixed-length crops for training, windows for scoring long files, and padded batches.

* :func:`fit_length` — crop a waveform to ``n`` samples (at a random offset in training,
  from the start in evaluation, as the ASVspoof baselines do) or pad it by repeating
  it (RawNet2/AASIST practice) or with zeros.
* :func:`windows` — cut a waveform into windows of ``n`` samples with a hop, the last one
  padded; a file is then scored by averaging its windows' scores.
* :func:`pad_batch` — stack waveforms of different lengths into ``[B, T_max]`` with their
  ``length`` and a boolean ``mask`` (True on real samples).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["Padding", "fit_length", "pad_batch", "windows"]

Padding = Literal["repeat", "zeros"]


def fit_length(
    wave: np.ndarray, n: int, *, padding: Padding = "repeat", rng: np.random.Generator | None = None
) -> np.ndarray:
    """``wave`` cropped or padded to exactly ``n`` samples.

    Longer input is cropped at a random offset drawn from ``rng`` (None: from the start);
    shorter input is tiled (``repeat``) or zero-padded at the end (``zeros``).
    """
    if n < 1:
        raise ValueError(f"target length must be at least 1 sample, got {n}")
    length = len(wave)
    if length >= n:
        start = int(rng.integers(0, length - n + 1)) if rng is not None and length > n else 0
        return wave[start : start + n]
    if padding == "repeat" and length > 0:
        return np.tile(wave, -(-n // length))[:n]
    out = np.zeros(n, dtype=wave.dtype)
    out[:length] = wave
    return out


def windows(wave: np.ndarray, n: int, hop: int | None = None, *, padding: Padding = "repeat") -> np.ndarray:
    """``[count, n]`` windows covering ``wave`` every ``hop`` samples (default ``n``); a file
    shorter than ``n`` gives one padded window, and the tail gets a last window that ends
    at the file's end (so no sample is left out and no window is mostly padding)."""
    hop = hop or n
    if hop < 1:
        raise ValueError(f"window hop must be at least 1 sample, got {hop}")
    if len(wave) <= n:
        return fit_length(wave, n, padding=padding)[None]
    starts = list(range(0, len(wave) - n + 1, hop))
    if starts[-1] + n < len(wave):
        starts.append(len(wave) - n)
    return np.stack([wave[s : s + n] for s in starts])


def pad_batch(waves: Sequence[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(input [B, T_max], length [B], mask [B, T_max])`` from 1-D waveforms, zero-padded."""
    import torch  # here, so that crops and windows serve the torch-free ONNX predictor too

    lengths = [len(w) for w in waves]
    longest = max(lengths) if lengths else 0
    batch = np.zeros((len(waves), longest), dtype=np.float32)
    for row, wave in zip(batch, waves, strict=True):
        row[: len(wave)] = wave
    length = torch.tensor(lengths, dtype=torch.long)
    mask = torch.arange(longest).unsqueeze(0) < length.unsqueeze(1)
    return torch.from_numpy(batch), length, mask
