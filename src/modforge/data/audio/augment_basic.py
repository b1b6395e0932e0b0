"""The waveform-level augmentations: ``rawboost`` (RawBoost, algorithms in :mod:`.rawboost`), ``gain``,
``time_shift`` and ``random_crop``."""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from ...core.registries import register_augmentation
from .augment_base import Augmentation, check_choice, check_sample_rate
from .rawboost import ALGORITHMS, RawBoostParams, rawboost

__all__ = ["Gain", "RandomCrop", "RawBoost", "TimeShift"]


# --------------------------------------------------------------------------- RawBoost
@register_augmentation("rawboost")
class RawBoost(Augmentation):
    """RawBoost distortions (Tak et al., ICASSP 2022): LnL convolutive, ISD impulsive and SSI
    coloured additive noise, alone or combined as selected by ``algo``.

    ``algo``: 0 none, 1 LnL, 2 ISD, 3 SSI, 4 series 1+2+3, 5 series 1+2, 6 series 1+3,
    7 series 2+3, 8 parallel 1||2. Defaults are the reference code's (TakHemlata/SSL_Anti-spoofing,
    whose LA recipe uses ``algo`` 5); the reference's flag names are given in brackets.

    Args:
        algo: which combination to apply, 0..8 (``--algo``).
        n_bands: notch bands per random filter; more bands, stronger distortion (``--nBands``).
        min_f: lowest band centre frequency in Hz (``--minF``).
        max_f: highest band centre frequency in Hz, clipped to sample_rate / 2 (``--maxF``).
        min_bw: narrowest notch band width in Hz (``--minBW``).
        max_bw: widest notch band width in Hz (``--maxBW``).
        min_coeff: fewest FIR taps per band (``--minCoeff``).
        max_coeff: most FIR taps per band; more taps, steeper slopes (``--maxCoeff``).
        min_g: lowest gain in dB of the linear filter and of the SSI noise filter (``--minG``).
        max_g: highest gain in dB of the linear filter and of the SSI noise filter (``--maxG``).
        min_bias_lin_nonlin: subtracted from min_g for the non-linear terms (``--minBiasLinNonLin``).
        max_bias_lin_nonlin: subtracted from max_g for the non-linear terms (``--maxBiasLinNonLin``).
        n_f: highest power of the signal in LnL; 1 means linear only (``--N_f``).
        isd_max_percent: at most this share of samples, in %, get impulsive noise (``--P``).
        g_sd: impulsive noise gain (``--g_sd``).
        snr_min: lowest SNR in dB of the coloured additive noise (``--SNRmin``).
        snr_max: highest SNR in dB of the coloured additive noise (``--SNRmax``).
        sample_rate: sampling rate in Hz (wired by the builder).
    """

    def __init__(
        self,
        algo: int = 5,
        n_bands: int = 5,
        min_f: float = 20.0,
        max_f: float = 8000.0,
        min_bw: float = 100.0,
        max_bw: float = 1000.0,
        min_coeff: int = 10,
        max_coeff: int = 100,
        min_g: float = 0.0,
        max_g: float = 0.0,
        min_bias_lin_nonlin: float = 5.0,
        max_bias_lin_nonlin: float = 20.0,
        n_f: int = 5,
        isd_max_percent: float = 10.0,
        g_sd: float = 2.0,
        snr_min: float = 10.0,
        snr_max: float = 40.0,
        sample_rate: int = 16000,
    ):
        if algo not in ALGORITHMS:
            choices = "; ".join(f"{k}: {v}" for k, v in ALGORITHMS.items())
            raise ValueError(f"algo must be one of 0..8 ({choices}), got {algo!r}")
        self.algo = algo
        self.sample_rate = sample_rate
        self.params = RawBoostParams(
            n_bands=n_bands,
            min_f=min_f,
            max_f=max_f,
            min_bw=min_bw,
            max_bw=max_bw,
            min_coeff=min_coeff,
            max_coeff=max_coeff,
            min_g=min_g,
            max_g=max_g,
            min_bias_lin_nonlin=min_bias_lin_nonlin,
            max_bias_lin_nonlin=max_bias_lin_nonlin,
            n_f=n_f,
            isd_max_percent=isd_max_percent,
            g_sd=g_sd,
            snr_min=snr_min,
            snr_max=snr_max,
        )
        self.params.check(sample_rate)

    def apply(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return rawboost(x, rng, self.algo, self.sample_rate, self.params)


# ------------------------------------------------------------------------------ gain
@register_augmentation("gain")
class Gain(Augmentation):
    """Multiply by a gain drawn uniformly in dB from ``[min_db, max_db]``.

    Args:
        min_db: lowest gain in dB.
        max_db: highest gain in dB.
        protect_clipping: lower the gain where needed so the output peak stays within 1.0
            (an input already peaking above 1 is scaled down to peak 1).
    """

    def __init__(self, min_db: float = -6.0, max_db: float = 6.0, protect_clipping: bool = True):
        if min_db > max_db:
            raise ValueError(f"need min_db <= max_db, got min_db={min_db}, max_db={max_db}")
        self.min_db = min_db
        self.max_db = max_db
        self.protect_clipping = protect_clipping

    def apply(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        gain = 10.0 ** (float(rng.uniform(self.min_db, self.max_db)) / 20.0)
        if self.protect_clipping:
            peak = float(np.max(np.abs(x)))
            if peak * gain > 1.0:
                gain = 1.0 / peak
        return x.astype(np.float64) * gain


# ------------------------------------------------------------------------ time_shift
@register_augmentation("time_shift")
class TimeShift(Augmentation):
    """Shift the waveform in time by a whole number of samples drawn uniformly from
    ``[-max_shift, max_shift]`` seconds; positive shifts delay the signal.

    Args:
        max_shift: largest shift in seconds, either way.
        mode: 'circular' wraps the samples pushed out round to the other end; 'zero' drops
            them and fills the gap with silence.
        sample_rate: sampling rate in Hz (wired by the builder).
    """

    def __init__(
        self, max_shift: float = 0.5, mode: Literal["circular", "zero"] = "circular", sample_rate: int = 16000
    ):
        check_sample_rate(sample_rate)
        if max_shift < 0:
            raise ValueError(f"max_shift must be >= 0 seconds, got {max_shift}")
        check_choice("mode", mode, ("circular", "zero"))
        self.max_shift = max_shift
        self.mode = mode
        self.sample_rate = sample_rate
        self._max_samples = int(round(max_shift * sample_rate))

    def apply(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        shift = int(rng.integers(-self._max_samples, self._max_samples + 1))
        if self.mode == "circular":
            return np.roll(x, shift)
        y = np.zeros_like(x)
        n = x.shape[0]
        if abs(shift) < n:
            if shift >= 0:
                y[shift:] = x[: n - shift]
            else:
                y[: n + shift] = x[-shift:]
        return y


# ----------------------------------------------------------------------- random_crop
@register_augmentation("random_crop")
class RandomCrop(Augmentation):
    """Bring every utterance to ``seconds`` (changes the length, by design): a longer one is
    cropped at a uniformly random offset; a shorter one is padded, by repeating it from a
    random starting sample ('repeat', as RawNet2/AASIST recipes pad) or by placing it at a
    random offset in silence ('zero').

    Args:
        seconds: output duration in seconds (64600 samples at 16 kHz is the AASIST cut, 4.0375 s).
        pad_mode: 'repeat' or 'zero', for utterances shorter than seconds.
        sample_rate: sampling rate in Hz (wired by the builder).
    """

    changes_length = True

    def __init__(self, seconds: float = 4.0, pad_mode: Literal["repeat", "zero"] = "repeat", sample_rate: int = 16000):
        check_sample_rate(sample_rate)
        length = int(round(seconds * sample_rate))
        if length < 1:
            raise ValueError(f"seconds must give at least one sample, got {seconds} s at {sample_rate} Hz")
        check_choice("pad_mode", pad_mode, ("repeat", "zero"))
        self.seconds = seconds
        self.pad_mode = pad_mode
        self.sample_rate = sample_rate
        self.length = length

    def apply(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        n, target = x.shape[0], self.length
        if n == 0:
            raise ValueError("random_crop got an empty waveform; it cannot pad nothing to a duration")
        if n >= target:
            start = int(rng.integers(n - target + 1))
            return x[start : start + target].copy()
        if self.pad_mode == "zero":
            start = int(rng.integers(target - n + 1))
            y = np.zeros(target, dtype=x.dtype)
            y[start : start + n] = x
            return y
        start = int(rng.integers(n))
        reps = math.ceil((start + target) / n)
        return np.tile(x, reps)[start : start + target]
