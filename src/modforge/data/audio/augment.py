"""Waveform augmentations for the audio data pipeline, and the pipeline that chains them.

Each augmentation is a small class registered as an ``augmentation`` and called on one
utterance at a time, ``aug(wave, rng) -> wave``: ``wave`` a 1-D float numpy array, ``rng``
a ``numpy.random.Generator``. Every random choice comes from ``rng`` — never from numpy's
global state or torch's — so the data layer makes augmentation reproducible and exactly
resumable by passing ``np.random.default_rng([seed, epoch, index])``. Outputs are float32,
finite (a silent input stays finite), and as long as the input except for
``random_crop``, whose purpose is to change the length.

Registered here:

* ``rawboost`` — RawBoost (Tak et al., ICASSP 2022), algorithms in :mod:`.rawboost`;
* ``add_noise`` — white / pink / brown noise, or noise from a folder of audio files, at a
  random SNR;
* ``gain`` — random gain in dB, optionally limited so the peak stays within 1;
* ``time_shift`` — circular or zero-filled shift;
* ``random_crop`` — crop or repeat/zero-pad to a fixed duration at a random offset;
* ``one_of`` — apply one of several augmentations, picked at random.

A config lists steps, each ``{type, args, p}`` (``p``: probability the step is applied,
default 1); :func:`build_augmentations` turns the list into a :class:`Pipeline`.
"""

from __future__ import annotations

import abc
import dataclasses
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal

import numpy as np

from ...core.coercion import coerce
from ...core.errors import ConfigError, ConfigValueError
from ...core.registries import AUGMENTATIONS, register_augmentation
from .rawboost import ALGORITHMS, RawBoostParams, rawboost

__all__ = [
    "AddNoise",
    "Augmentation",
    "Gain",
    "OneOf",
    "Pipeline",
    "RandomCrop",
    "RawBoost",
    "Step",
    "TimeShift",
    "as_waveform",
    "build_augmentations",
    "colored_noise",
]


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


def _check_rng(rng: Any) -> None:
    if not isinstance(rng, np.random.Generator):
        raise TypeError(
            f"expected a numpy.random.Generator as rng (e.g. np.random.default_rng(seed)), got {type(rng).__name__}"
        )


def _check_sample_rate(sample_rate: int) -> None:
    if sample_rate <= 0:
        raise ValueError(f"sample_rate must be positive, got {sample_rate}")


def _power(x: np.ndarray) -> float:
    """Mean square, in float64."""
    return float(np.mean(np.square(x, dtype=np.float64))) if x.size else 0.0


class Augmentation(abc.ABC):
    """Base class: input checks and float32 output around :meth:`apply`.

    Subclasses implement ``apply(x, rng)`` on a 1-D float32 array and may return any float
    dtype. ``changes_length`` is True only for augmentations whose purpose is a new length.
    """

    changes_length: bool = False

    def __call__(self, wave: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        x = as_waveform(wave)
        _check_rng(rng)
        if x.size == 0 and not self.changes_length:
            return x.copy()
        return np.ascontiguousarray(self.apply(x, rng), dtype=np.float32)

    @abc.abstractmethod
    def apply(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The augmentation proper, on a non-empty 1-D float32 array; all randomness from ``rng``."""

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({fields})"


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


# -------------------------------------------------------------------------- add_noise
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


def _audio_suffixes() -> frozenset[str]:
    import soundfile

    return frozenset("." + fmt.lower() for fmt in soundfile.available_formats() if fmt.upper() != "RAW")


class _NoiseFolder:
    """The audio files under a folder, read as random mono segments at a given rate."""

    def __init__(self, folder: str, sample_rate: int):
        suffixes = _audio_suffixes()
        if not os.path.isdir(folder):
            raise ValueError(f"noise_dir {folder!r} does not exist or is not a folder")
        files = []
        for root, dirs, names in os.walk(folder):  # links are not descended into, linked files not read
            dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(root, d)))
            files.extend(
                os.path.join(root, name) for name in sorted(names)
                if os.path.splitext(name)[1].lower() in suffixes and not os.path.islink(os.path.join(root, name))
            )  # fmt: skip
        if not files:
            raise ValueError(
                f"noise_dir {folder!r} holds no audio files (looked for {', '.join(sorted(suffixes))}, recursively)"
            )
        self.folder = folder
        self.files = files
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
        _check_sample_rate(sample_rate)
        if snr_min > snr_max:
            raise ValueError(f"need snr_min <= snr_max, got snr_min={snr_min}, snr_max={snr_max}")
        if noise_type not in (*_NOISE_EXPONENTS, "file"):
            raise ValueError(f"noise_type must be 'white', 'pink', 'brown' or 'file', got {noise_type!r}")
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
        signal_power, noise_power = _power(x), _power(noise)
        if signal_power == 0.0 or noise_power == 0.0 or not np.isfinite(noise_power):
            return x.copy()
        scale = math.sqrt(signal_power / (noise_power * 10.0 ** (snr_db / 10.0)))
        return x.astype(np.float64) + scale * noise


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
        _check_sample_rate(sample_rate)
        if max_shift < 0:
            raise ValueError(f"max_shift must be >= 0 seconds, got {max_shift}")
        if mode not in ("circular", "zero"):
            raise ValueError(f"mode must be 'circular' or 'zero', got {mode!r}")
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
        _check_sample_rate(sample_rate)
        length = int(round(seconds * sample_rate))
        if length < 1:
            raise ValueError(f"seconds must give at least one sample, got {seconds} s at {sample_rate} Hz")
        if pad_mode not in ("repeat", "zero"):
            raise ValueError(f"pad_mode must be 'repeat' or 'zero', got {pad_mode!r}")
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


# ----------------------------------------------------------------------- composition
@dataclasses.dataclass(frozen=True)
class Step:
    """One pipeline step: an augmentation applied with probability ``p``.

    Attributes:
        augment: any ``(wave, rng) -> wave`` callable.
        p: probability of applying it, in [0, 1].
        name: for messages and ``repr`` (the spec's ``type``).
    """

    augment: Callable[[np.ndarray, np.random.Generator], np.ndarray]
    p: float = 1.0
    name: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.p, bool) or not 0.0 <= float(self.p) <= 1.0:
            raise ValueError(f"p (probability of applying {self.name or 'the step'}) must be in [0, 1], got {self.p!r}")

    def __call__(self, wave: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Draw one uniform number from ``rng``; apply the augmentation iff it is below ``p``."""
        if rng.random() < self.p:
            return as_waveform(self.augment(wave, rng))
        return as_waveform(wave)


class Pipeline:
    """Steps applied in order to one waveform; an empty pipeline returns its input.

    Each step first draws one uniform number from ``rng`` and is applied when it is below
    ``p`` (so ``p = 0`` never applies, ``p = 1`` always does); an applied step's augmentation
    then draws what it needs from the same ``rng``.

    Args:
        steps: :class:`Step` objects (bare callables are wrapped with ``p = 1``).
    """

    def __init__(self, steps: Iterable[Step | Callable[..., np.ndarray]] = ()):
        self.steps: tuple[Step, ...] = tuple(
            s if isinstance(s, Step) else Step(s, 1.0, type(s).__name__) for s in steps
        )

    def __call__(self, wave: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        x = as_waveform(wave)
        _check_rng(rng)
        for step in self.steps:
            x = step(x, rng)
        return x

    @property
    def changes_length(self) -> bool:
        """True when some step may change the length (``random_crop``)."""
        return any(getattr(s.augment, "changes_length", False) for s in self.steps)

    def __len__(self) -> int:
        return len(self.steps)

    def __iter__(self) -> Iterator[Step]:
        return iter(self.steps)

    def __bool__(self) -> bool:
        return bool(self.steps)

    def __repr__(self) -> str:
        inner = ", ".join(f"{s.name or type(s.augment).__name__}(p={s.p:g})" for s in self.steps)
        return f"Pipeline([{inner}])"


_RELATIVE = "_modforge_relative_to_step"  # marks an error whose path is relative to the step being built


@register_augmentation("one_of")
class OneOf(Augmentation):
    """Apply exactly one of several augmentations, picked at random (by ``weights``).

    The picked choice's own ``p`` still applies, so ``one_of`` with ``p`` on the choices can
    also apply nothing.

    Args:
        choices: augmentation specs, each ``{type, args, p}`` like a pipeline step.
        weights: relative chance of each choice (default: equal).
        sample_rate: sampling rate in Hz (wired by the builder, handed to the choices).
    """

    def __init__(self, choices: list[Any], weights: list[float] | None = None, sample_rate: int = 16000):
        try:
            pipeline = build_augmentations(choices, sample_rate, path="args.choices")
        except ConfigError as exc:
            setattr(exc, _RELATIVE, True)  # build_augmentations puts it under this step's path
            raise
        if not pipeline.steps:
            raise ValueError("one_of needs at least one choice")
        if weights is None:
            weights = [1.0] * len(pipeline.steps)
        if len(weights) != len(pipeline.steps):
            raise ValueError(f"weights has {len(weights)} entries for {len(pipeline.steps)} choices")
        if any(w < 0 or not math.isfinite(w) for w in weights) or sum(weights) <= 0:
            raise ValueError(f"weights must be finite, >= 0 and not all 0, got {weights}")
        self.steps = pipeline.steps
        self.weights = [float(w) for w in weights]
        self.sample_rate = sample_rate
        self._probabilities = np.asarray(self.weights) / sum(self.weights)
        self.changes_length = any(getattr(s.augment, "changes_length", False) for s in self.steps)

    def apply(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        index = int(rng.choice(len(self.steps), p=self._probabilities))
        return self.steps[index](x, rng)


def _relocate(exc: ConfigError, prefix: str) -> None:
    """Put an error raised while building ``one_of``'s choices under the step's own path."""
    if getattr(exc, _RELATIVE, False):
        setattr(exc, _RELATIVE, False)
        exc.path = f"{prefix}.{exc.path}" if exc.path else prefix
        exc.args = (str(exc),)


def build_augmentations(
    specs: Sequence[Any] | None,
    sample_rate: int,
    path: str = "data.augment",
    *,
    origin_of: Callable[[str], str | None] | None = None,
    allowed_modules: Iterable[str] = (),
    base_dir: str | None = None,
) -> Pipeline:
    """Build a :class:`Pipeline` from a list of specs ``{type, args, p}`` (or bare names).

    Args:
        specs: the steps, in order; ``None`` or ``[]`` gives an empty pipeline.
        sample_rate: handed to every augmentation that takes ``sample_rate``.
        path: config path of the list, for messages (steps are ``path.0``, ``path.1``...).
        origin_of: maps a config path to the file/override it came from.
        allowed_modules: plug-in modules whose objects a ``type`` may name by import path.
        base_dir: folder that relative plug-in paths are resolved against.

    Raises:
        ConfigError: not a list, an unknown ``type``, a bad argument, or ``p`` outside [0, 1],
            located at the step's path (``data.augment.1.p``).
    """
    where = origin_of or (lambda _p: None)
    if specs is None:
        return Pipeline()
    if isinstance(specs, (str, Mapping)) or not isinstance(specs, Sequence):
        raise ConfigValueError(
            f"expected a list of augmentation steps ({{type: NAME, args: {{...}}, p: 0.5}}), got {specs!r}",
            path=path,
            source=where(path),
        )
    steps = []
    for i, spec in enumerate(specs):
        item = f"{path}.{i}"
        p = 1.0
        if isinstance(spec, Mapping) and "p" in spec:
            try:
                p = coerce(spec["p"], float)
            except ConfigError as exc:
                raise exc.located(path=f"{item}.p", source=where(f"{item}.p")) from None
            if not 0.0 <= p <= 1.0:
                raise ConfigValueError(
                    f"p is the probability of applying the step and must be in [0, 1], got {spec['p']!r}",
                    path=f"{item}.p",
                    source=where(f"{item}.p"),
                )
        try:
            augment = AUGMENTATIONS.build(
                spec,
                path=item,
                extras=("p",),
                origin_of=origin_of,
                allowed_modules=allowed_modules,
                base_dir=base_dir,
                sample_rate=sample_rate,
            )
        except ConfigError as exc:
            _relocate(exc, item)
            raise
        name = spec if isinstance(spec, str) else str(spec["type"])  # build() accepted it: a name or a mapping
        steps.append(Step(augment, p, name.strip()))
    return Pipeline(steps)
