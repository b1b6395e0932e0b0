"""Channel augmentations: ``speed``, ``background_noise``, ``babble``, ``drop_freq``,
``drop_chunk`` and ``clipping``.

Why: besides codecs (:mod:`.codecs`) and rooms (:mod:`.rooms`), a recording channel changes
speed (clock drift; Kaldi's 0.9/1.0/1.1 speed perturbation), adds background noise and
babble (MUSAN), loses frequency bands and stretches of samples (SpeechBrain's DropFreq and
DropChunk), and clips. The signal processing is library code — soxr resamples, scipy
filters; this module draws the parameters from the per-(seed, epoch, index) generator and
keeps the length.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from ...core.registries import register_augmentation
from .audio_folder import AudioFolder
from .augment_base import Augmentation, check_sample_rate, mean_square, mix_at_snr

__all__ = ["Babble", "BackgroundNoise", "Clipping", "DropChunk", "DropFreq", "Speed", "fit_to"]


def fit_to(y: np.ndarray, n: int) -> np.ndarray:
    """``y`` cut or zero-padded at the end to ``n`` samples."""
    return y[:n] if y.shape[0] >= n else np.pad(y, (0, n - y.shape[0]))


def _check_range(name: str, low: float, high: float, floor: float | None = None) -> None:
    if low > high:
        raise ValueError(f"need {name}_min <= {name}_max, got {low} > {high}")
    if floor is not None and low < floor:
        raise ValueError(f"{name}_min must be >= {floor}, got {low}")


# ------------------------------------------------------------------------------ speed
@register_augmentation("speed")
class Speed(Augmentation):
    """Speed perturbation (tempo and pitch together, as Kaldi's ``sox speed``): resample by
    a factor picked from ``factors`` (soxr), so 1.1 plays 10 % faster.

    Args:
        factors: speed factors to choose from, uniformly (None: [0.9, 1.0, 1.1]).
        keep_length: cut or zero-pad the result to the input's length (False: the length
            changes by the factor, like ``random_crop`` this step then changes length).
        sample_rate: sampling rate in Hz (wired by the builder).
    """

    def __init__(self, factors: list[float] | None = None, keep_length: bool = True, sample_rate: int = 16000):
        check_sample_rate(sample_rate)
        factors = [0.9, 1.0, 1.1] if factors is None else [float(f) for f in factors]
        if not factors or any(not 0.5 <= f <= 2.0 for f in factors):
            raise ValueError(f"factors must be a non-empty list of speeds in [0.5, 2], got {factors}")
        self.factors, self.keep_length, self.sample_rate = factors, keep_length, sample_rate
        self.changes_length = not keep_length

    def apply(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        import soxr

        factor = self.factors[int(rng.integers(len(self.factors)))]
        if factor == 1.0:
            return x.copy()
        y = soxr.resample(x.astype(np.float64), self.sample_rate * factor, self.sample_rate, quality="HQ")
        return fit_to(y, x.shape[0]) if self.keep_length else y


# ------------------------------------------------------------------- noise from folders
@register_augmentation("background_noise")
class BackgroundNoise(Augmentation):
    """Add a random segment of a random recording under ``noise_dir`` (MUSAN-style: pick
    sub-folders such as ``noise`` or ``music``) at an SNR drawn from ``[snr_min, snr_max]`` dB.
    Files are read through :class:`.audio_folder.AudioFolder` (links never followed), mixed to
    mono, resampled, looped when shorter than the utterance.

    Args:
        noise_dir: folder searched recursively for audio files.
        subfolders: only these relative sub-folders (None: the whole folder).
        snr_min: lowest SNR in dB.
        snr_max: highest SNR in dB.
        cache: keep decoded noise files in memory (per worker).
        sample_rate: sampling rate in Hz (wired by the builder).
    """

    def __init__(
        self,
        noise_dir: str,
        subfolders: list[str] | None = None,
        snr_min: float = 0.0,
        snr_max: float = 15.0,
        cache: bool = True,
        sample_rate: int = 16000,
    ):
        check_sample_rate(sample_rate)
        _check_range("snr", snr_min, snr_max)
        self.noise_dir, self.subfolders, self.snr_min, self.snr_max = noise_dir, subfolders, snr_min, snr_max
        self.sample_rate = sample_rate
        self._folder = AudioFolder(noise_dir, sample_rate, subfolders, what="noise_dir", cache=cache)

    def apply(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        snr_db = float(rng.uniform(self.snr_min, self.snr_max))
        return mix_at_snr(x, self._folder.segment(x.shape[0], rng), snr_db)


@register_augmentation("babble")
class Babble(Augmentation):
    """Add babble: the sum of ``speakers_min``..``speakers_max`` random speech segments from
    ``speech_dir`` (e.g. MUSAN's ``speech`` sub-folder), each normalised to unit power, at an
    SNR drawn from ``[snr_min, snr_max]`` dB.

    Args:
        speech_dir: folder of speech recordings, searched recursively.
        subfolders: only these relative sub-folders (None: the whole folder).
        speakers_min: fewest talkers.
        speakers_max: most talkers.
        snr_min: lowest SNR in dB.
        snr_max: highest SNR in dB.
        cache: keep decoded files in memory (per worker).
        sample_rate: sampling rate in Hz (wired by the builder).
    """

    def __init__(
        self,
        speech_dir: str,
        subfolders: list[str] | None = None,
        speakers_min: int = 3,
        speakers_max: int = 7,
        snr_min: float = 13.0,
        snr_max: float = 20.0,
        cache: bool = True,
        sample_rate: int = 16000,
    ):
        check_sample_rate(sample_rate)
        _check_range("speakers", speakers_min, speakers_max, floor=1)
        _check_range("snr", snr_min, snr_max)
        self.speech_dir, self.subfolders = speech_dir, subfolders
        self.speakers_min, self.speakers_max, self.snr_min, self.snr_max = speakers_min, speakers_max, snr_min, snr_max
        self.sample_rate = sample_rate
        self._folder = AudioFolder(speech_dir, sample_rate, subfolders, what="speech_dir", cache=cache)

    def apply(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        snr_db = float(rng.uniform(self.snr_min, self.snr_max))
        talkers = int(rng.integers(self.speakers_min, self.speakers_max + 1))
        babble = np.zeros(x.shape[0])
        for _ in range(talkers):
            segment = self._folder.segment(x.shape[0], rng)
            power = mean_square(segment)
            if power > 0.0:
                babble += segment / math.sqrt(power)
        return mix_at_snr(x, babble, snr_db)


# ------------------------------------------------------------------------- drop_freq
@register_augmentation("drop_freq")
class DropFreq(Augmentation):
    """Drop frequency bands (SpeechBrain's DropFreq): ``count_min``..``count_max`` notches at
    centre frequencies drawn uniformly from ``[freq_min, freq_max]`` (fractions of Nyquist),
    each ``width`` wide (fraction of Nyquist). Zero-phase (scipy ``iirnotch`` run forwards
    and backwards with ``sosfiltfilt``), so the speech stays aligned.

    Args:
        count_min: fewest bands dropped.
        count_max: most bands dropped.
        freq_min: lowest centre, as a fraction of Nyquist (0, 1).
        freq_max: highest centre, as a fraction of Nyquist (0, 1).
        width: band width, as a fraction of Nyquist.
    """

    def __init__(
        self, count_min: int = 1, count_max: int = 3, freq_min: float = 0.01, freq_max: float = 0.95,
        width: float = 0.05,
    ):  # fmt: skip
        _check_range("count", count_min, count_max, floor=0)
        _check_range("freq", freq_min, freq_max)
        if not (0 < freq_min and freq_max < 1):
            raise ValueError(f"freq_min/freq_max are fractions of Nyquist in (0, 1), got {freq_min}, {freq_max}")
        if not 0 < width < 1:
            raise ValueError(f"width is a fraction of Nyquist in (0, 1), got {width}")
        self.count_min, self.count_max, self.freq_min, self.freq_max, self.width = (
            count_min, count_max, freq_min, freq_max, width,
        )  # fmt: skip

    def apply(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        from scipy.signal import iirnotch, sosfiltfilt

        count = int(rng.integers(self.count_min, self.count_max + 1))
        centres = rng.uniform(self.freq_min, self.freq_max, size=count)
        if count == 0:
            return x.copy()
        sos = np.stack([np.concatenate(iirnotch(float(c), float(c) / self.width)) for c in centres])  # biquads
        padlen = min(3 * (2 * sos.shape[0] + 1), x.shape[0] - 1)
        return sosfiltfilt(sos, x.astype(np.float64), padlen=max(padlen, 0))


# ------------------------------------------------------------------------ drop_chunk
@register_augmentation("drop_chunk")
class DropChunk(Augmentation):
    """Silence ``count_min``..``count_max`` stretches of ``length_min``..``length_max``
    seconds at random positions (SpeechBrain's DropChunk; packet loss, dropouts).

    Args:
        count_min: fewest stretches.
        count_max: most stretches.
        length_min: shortest stretch in seconds.
        length_max: longest stretch in seconds.
        sample_rate: sampling rate in Hz (wired by the builder).
    """

    def __init__(
        self, count_min: int = 1, count_max: int = 5, length_min: float = 0.01, length_max: float = 0.1,
        sample_rate: int = 16000,
    ):  # fmt: skip
        check_sample_rate(sample_rate)
        _check_range("count", count_min, count_max, floor=0)
        _check_range("length", length_min, length_max, floor=0.0)
        self.count_min, self.count_max, self.length_min, self.length_max = count_min, count_max, length_min, length_max
        self.sample_rate = sample_rate

    def apply(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        n = x.shape[0]
        count = int(rng.integers(self.count_min, self.count_max + 1))
        lengths = np.rint(rng.uniform(self.length_min, self.length_max, size=count) * self.sample_rate).astype(int)
        starts = rng.integers(0, n, size=count)
        y = x.copy()
        for start, length in zip(starts.tolist(), np.minimum(lengths, n).tolist(), strict=True):
            y[start : start + length] = 0.0
        return y


# -------------------------------------------------------------------------- clipping
@register_augmentation("clipping")
class Clipping(Augmentation):
    """Hard-clip the waveform so that a share drawn from ``[percent_min, percent_max]`` % of
    its samples (the loudest) hit the threshold — as audiomentations' ClippingDistortion.

    Args:
        percent_min: smallest share of samples clipped, in %.
        percent_max: largest share of samples clipped, in %.
        mode: 'hard' clips at the threshold; 'soft' saturates with tanh scaled to it.
    """

    def __init__(self, percent_min: float = 0.0, percent_max: float = 20.0, mode: Literal["hard", "soft"] = "hard"):
        _check_range("percent", percent_min, percent_max, floor=0.0)
        if percent_max >= 100:
            raise ValueError(f"percent_max must be < 100, got {percent_max}")
        if mode not in ("hard", "soft"):
            raise ValueError(f"mode must be 'hard' or 'soft', got {mode!r}")
        self.percent_min, self.percent_max, self.mode = percent_min, percent_max, mode

    def apply(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        percent = float(rng.uniform(self.percent_min, self.percent_max))
        threshold = float(np.percentile(np.abs(x), 100.0 - percent))
        if threshold <= 0.0:
            return x.copy()
        if self.mode == "soft":
            return threshold * np.tanh(x.astype(np.float64) / threshold)
        return np.clip(x, -threshold, threshold)
