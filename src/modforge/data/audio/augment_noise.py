"""``add_noise``: white, pink or brown Gaussian noise, or a segment of a noise file, at a random SNR."""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from ...core.registries import register_augmentation
from .audio_folder import list_audio_files
from .augment_base import Augmentation, check_choice, check_sample_rate, mix_at_snr

__all__ = ["AddNoise", "colored_noise"]

_NOISE_EXPONENTS = {"white": 0.0, "pink": 1.0, "brown": 2.0}


def colored_noise(n: int, rng: np.random.Generator, color: str = "white") -> np.ndarray:
    """``n`` samples of Gaussian noise whose power spectrum falls as ``1 / f**k``: white
    ``k = 0``, pink ``k = 1``, brown (red) ``k = 2``. Zero mean; the level is arbitrary."""
    if color not in _NOISE_EXPONENTS:
        raise ValueError(f"noise color must be one of {sorted(_NOISE_EXPONENTS)}, got {color!r}")
    white = rng.standard_normal(n)
    exponent = _NOISE_EXPONENTS[color]
    if exponent == 0.0 or n < 2:
        return white
    spectrum = np.fft.rfft(white)
    freqs = np.arange(spectrum.shape[0], dtype=np.float64)
    freqs[0] = 1.0
    spectrum = spectrum / freqs ** (exponent / 2.0)
    spectrum[0] = 0.0  # no DC: a random offset is not noise
    return np.fft.irfft(spectrum, n=n)


class _NoiseFolder:
    """The audio files under a folder, read as random mono segments at a given rate."""

    def __init__(self, folder: str, sample_rate: int):
        self.folder = folder
        self.files = list_audio_files(folder, "noise_dir")
        self.sample_rate = sample_rate
        self._info: dict[str, tuple[int, int]] = {}

    def _frames_and_rate(self, path: str) -> tuple[int, int]:
        if path not in self._info:
            import soundfile

            info = soundfile.info(path)
            if info.frames <= 0:
                raise ValueError(f"noise file {path!r} is empty")
            self._info[path] = (int(info.frames), int(info.samplerate))
        return self._info[path]

    def segment(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` samples from a random file at a random offset (looped when the file is short)."""
        import soundfile

        path = self.files[int(rng.integers(len(self.files)))]
        frames, rate = self._frames_and_rate(path)
        need = n if rate == self.sample_rate else math.ceil(n * rate / self.sample_rate) + 1
        if frames >= need:
            start = int(rng.integers(frames - need + 1))
            data, _ = soundfile.read(path, start=start, frames=need, dtype="float64", always_2d=True)
        else:
            whole, _ = soundfile.read(path, dtype="float64", always_2d=True)
            start = int(rng.integers(frames))
            reps = math.ceil((start + need) / frames)
            data = np.tile(whole, (reps, 1))[start : start + need]
        mono = data.mean(axis=1)
        if rate != self.sample_rate:
            from scipy.signal import resample_poly

            g = math.gcd(self.sample_rate, rate)
            mono = resample_poly(mono, self.sample_rate // g, rate // g)
        if mono.shape[0] < n:
            mono = np.pad(mono, (0, n - mono.shape[0]))
        return mono[:n]


@register_augmentation("add_noise")
class AddNoise(Augmentation):
    """Add noise at a signal-to-noise ratio drawn uniformly from ``[snr_min, snr_max]`` dB.

    The SNR is ``10 log10(mean(x**2) / mean(noise**2))`` over the whole utterance. Noise is
    white, pink (1/f power) or brown (1/f**2) Gaussian noise, or, with ``noise_type: file``, a
    random segment of a random audio file under ``noise_dir`` (read with soundfile, mixed to
    mono, resampled to ``sample_rate``, looped when shorter than the utterance). A silent
    utterance gets no noise (its SNR is undefined) and stays silent.

    Args:
        snr_min: lowest SNR in dB.
        snr_max: highest SNR in dB.
        noise_type: 'white', 'pink', 'brown', or 'file' (needs noise_dir).
        noise_dir: folder searched recursively for audio files, for noise_type 'file'.
        sample_rate: sampling rate in Hz (wired by the builder).
    """

    def __init__(
        self,
        snr_min: float = 5.0,
        snr_max: float = 40.0,
        noise_type: Literal["white", "pink", "brown", "file"] = "white",
        noise_dir: str | None = None,
        sample_rate: int = 16000,
    ):
        check_sample_rate(sample_rate)
        if snr_min > snr_max:
            raise ValueError(f"need snr_min <= snr_max, got snr_min={snr_min}, snr_max={snr_max}")
        check_choice("noise_type", noise_type, (*_NOISE_EXPONENTS, "file"))
        if noise_type == "file" and not noise_dir:
            raise ValueError("noise_type 'file' needs noise_dir, a folder of audio files")
        if noise_dir and noise_type != "file":
            raise ValueError(f"noise_dir is only read with noise_type 'file' (noise_type is {noise_type!r})")
        self.snr_min = snr_min
        self.snr_max = snr_max
        self.noise_type = noise_type
        self.noise_dir = noise_dir
        self.sample_rate = sample_rate
        self._folder = _NoiseFolder(noise_dir, sample_rate) if noise_type == "file" and noise_dir else None

    def apply(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        snr_db = float(rng.uniform(self.snr_min, self.snr_max))
        if self._folder is not None:
            noise = self._folder.segment(x.shape[0], rng)
        else:
            noise = colored_noise(x.shape[0], rng, self.noise_type)
        return mix_at_snr(x, noise, snr_db)
