"""The contract every waveform augmentation keeps, and the checks and measures they share.

An augmentation is called on one utterance at a time, ``aug(wave, rng) -> wave``: ``wave`` a 1-D float
numpy array, ``rng`` a ``numpy.random.Generator`` from which every random choice comes (never numpy's global
state or torch's), so the data layer makes augmentation reproducible and exactly resumable by passing
``np.random.default_rng([seed, epoch, index])``. :class:`Augmentation` checks the input and returns float32;
subclasses write :meth:`Augmentation.apply`. The registered augmentations are listed in :mod:`.augment`.
"""

from __future__ import annotations

import abc
import math
from typing import Any

import numpy as np

__all__ = ["Augmentation", "as_waveform", "check_choice", "check_rng", "check_sample_rate", "mean_square", "mix_at_snr"]


def as_waveform(wave: Any) -> np.ndarray:
    """``wave`` as a 1-D float32 numpy array (no copy when it already is one).

    Raises:
        ValueError: not one-dimensional, or not real floating point (integer PCM must be
            scaled to floats by the reader first).
    """
    x = np.asarray(wave)
    if x.ndim != 1:
        raise ValueError(f"expected a 1-D waveform (one utterance, one channel), got shape {tuple(x.shape)}")
    if not np.issubdtype(x.dtype, np.floating):
        raise ValueError(f"expected a floating-point waveform, got dtype {x.dtype}")
    return x.astype(np.float32, copy=False)


def check_rng(rng: Any) -> None:
    """A TypeError unless ``rng`` is a ``numpy.random.Generator``."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(
            f"expected a numpy.random.Generator as rng (e.g. np.random.default_rng(seed)), got {type(rng).__name__}"
        )


def check_sample_rate(sample_rate: int) -> None:
    """A ValueError unless ``sample_rate`` is positive."""
    if sample_rate <= 0:
        raise ValueError(f"sample_rate must be positive, got {sample_rate}")


def mean_square(x: np.ndarray) -> float:
    """Mean square, in float64."""
    return float(np.mean(np.square(x, dtype=np.float64))) if x.size else 0.0


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    """A ValueError naming the argument and its choices (``mode must be 'circular' or 'zero', got 'x'``)
    unless ``value`` is one of ``choices``."""
    if value not in choices:
        quoted = [repr(c) for c in choices]
        raise ValueError(f"{name} must be {', '.join(quoted[:-1])} or {quoted[-1]}, got {value!r}")


def mix_at_snr(x: np.ndarray, noise: np.ndarray, snr_db: float) -> np.ndarray:
    """``x`` plus ``noise`` scaled so that ``10 log10(mean_square(x) / mean_square(noise)) == snr_db`` over the whole
    utterance, in float64; ``x`` unchanged when either is silent (the SNR is undefined) or the noise is not finite."""
    signal_power, noise_power = mean_square(x), mean_square(noise)
    if signal_power == 0.0 or noise_power == 0.0 or not np.isfinite(noise_power):
        return x.astype(np.float64)
    return x.astype(np.float64) + math.sqrt(signal_power / (noise_power * 10.0 ** (snr_db / 10.0))) * noise


class Augmentation(abc.ABC):
    """Base class: input checks and float32 output around :meth:`apply`.

    Subclasses implement ``apply(x, rng)`` on a 1-D float32 array and may return any float
    dtype. ``changes_length`` is True only for augmentations whose purpose is a new length.
    """

    changes_length: bool = False

    def __call__(self, wave: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        x = as_waveform(wave)
        check_rng(rng)
        if x.size == 0 and not self.changes_length:
            return x.copy()
        return np.ascontiguousarray(self.apply(x, rng), dtype=np.float32)

    @abc.abstractmethod
    def apply(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The augmentation proper, on a non-empty 1-D float32 array; all randomness from ``rng``."""

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({fields})"
