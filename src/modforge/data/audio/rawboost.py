"""RawBoost: the three signal-processing distortions of Tak et al. and their combinations.

H. Tak, M. Kamble, J. Patino, M. Todisco, N. Evans, "RawBoost: A Raw Data Boosting and
Augmentation Method applied to Automatic Speaker Verification Anti-Spoofing", ICASSP 2022
(reference code: ``RawBoost.py`` in TakHemlata/RawBoost-antispoofing and SSL_Anti-spoofing).

RawBoost distorts a raw waveform the way telephony and transmission channels do, without
any external data:

1. **LnL** — linear and non-linear convolutive noise: the signal and its powers
   ``x**2 .. x**N_f`` each go through a random multi-band notch FIR filter (a cascade of
   ``n_bands`` Hamming-window band-stop filters with random centre frequency, bandwidth and
   length), with the non-linear terms attenuated by a random bias; the sum is re-centred.
2. **ISD** — impulsive signal-dependent additive noise: a random ``beta`` in ``[0, P]`` %
   of the samples get ``x[i] * g_sd * u1 * u2`` added (``u1``, ``u2`` uniform in ``[-1, 1]``).
3. **SSI** — stationary signal-independent additive noise: white Gaussian noise coloured by a
   random notch filter, added at an SNR drawn from ``[snr_min, snr_max]`` dB.

``algo`` selects one of the reference's combinations (:data:`ALGORITHMS`). Everything is
pure numpy/scipy and every random number comes from the ``numpy.random.Generator`` given,
so a distortion is reproducible from the generator's seed. Two deliberate differences from
the reference code: filtering compensates the linear-phase delay exactly (the reference's
padding leaves a one-sample shift), and the centre-frequency range is clipped to the
Nyquist frequency so that sample rates below 16 kHz work.
"""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = [
    "ALGORITHMS",
    "RawBoostParams",
    "fir_filter",
    "isd_additive_noise",
    "lnl_convolutive_noise",
    "notch_filter_coefficients",
    "rawboost",
    "ssi_additive_noise",
]

ALGORITHMS: dict[int, str] = {
    0: "no distortion",
    1: "LnL convolutive noise",
    2: "ISD impulsive additive noise",
    3: "SSI coloured additive noise",
    4: "series 1+2+3 (LnL, then ISD, then SSI)",
    5: "series 1+2 (LnL, then ISD)",
    6: "series 1+3 (LnL, then SSI)",
    7: "series 2+3 (ISD, then SSI)",
    8: "parallel 1||2 (LnL and ISD of the same input, summed and peak-limited)",
}
"""The reference's ``algo`` settings, by number."""

_EDGE_HZ = 1e-3  # the reference keeps band edges this far inside (0, fs/2)


@dataclasses.dataclass(frozen=True)
class RawBoostParams:
    """RawBoost's parameters; defaults are the reference code's command-line defaults.

    Attributes:
        n_bands: notch bands per filter (``nBands``).
        min_f: lowest band centre frequency in Hz (``minF``).
        max_f: highest band centre frequency in Hz (``maxF``; clipped to the Nyquist frequency).
        min_bw: narrowest band width in Hz (``minBW``).
        max_bw: widest band width in Hz (``maxBW``).
        min_coeff: fewest FIR taps per band (``minCoeff``; even counts become odd).
        max_coeff: most FIR taps per band (``maxCoeff``).
        min_g: lowest filter gain in dB for the linear term and SSI (``minG``).
        max_g: highest filter gain in dB for the linear term and SSI (``maxG``).
        min_bias_lin_nonlin: subtracted from ``min_g`` for the non-linear terms (``minBiasLinNonLin``).
        max_bias_lin_nonlin: subtracted from ``max_g`` for the non-linear terms (``maxBiasLinNonLin``).
        n_f: highest power of the signal in LnL; 1 means linear only (``N_f``).
        isd_max_percent: largest share of samples ISD touches, in % (``P``).
        g_sd: ISD gain (``g_sd``).
        snr_min: lowest SSI signal-to-noise ratio in dB (``SNRmin``).
        snr_max: highest SSI signal-to-noise ratio in dB (``SNRmax``).
    """

    n_bands: int = 5
    min_f: float = 20.0
    max_f: float = 8000.0
    min_bw: float = 100.0
    max_bw: float = 1000.0
    min_coeff: int = 10
    max_coeff: int = 100
    min_g: float = 0.0
    max_g: float = 0.0
    min_bias_lin_nonlin: float = 5.0
    max_bias_lin_nonlin: float = 20.0
    n_f: int = 5
    isd_max_percent: float = 10.0
    g_sd: float = 2.0
    snr_min: float = 10.0
    snr_max: float = 40.0

    def check(self, sample_rate: int) -> None:
        """Raise one ``ValueError`` naming the first inconsistent parameter."""
        if sample_rate <= 0:
            raise ValueError(f"sample_rate must be positive, got {sample_rate}")
        if self.n_bands < 1:
            raise ValueError(f"n_bands must be at least 1, got {self.n_bands}")
        if self.n_f < 1:
            raise ValueError(f"n_f (highest non-linear order) must be at least 1, got {self.n_f}")
        if not 0 <= self.min_f <= self.max_f:
            raise ValueError(f"need 0 <= min_f <= max_f, got min_f={self.min_f}, max_f={self.max_f}")
        if self.min_f >= sample_rate / 2:
            raise ValueError(f"min_f ({self.min_f} Hz) must be below the Nyquist frequency ({sample_rate / 2} Hz)")
        if not 0 < self.min_bw <= self.max_bw:
            raise ValueError(f"need 0 < min_bw <= max_bw, got min_bw={self.min_bw}, max_bw={self.max_bw}")
        if not 1 <= self.min_coeff <= self.max_coeff:
            raise ValueError(
                f"need 1 <= min_coeff <= max_coeff, got min_coeff={self.min_coeff}, max_coeff={self.max_coeff}"
            )
        if self.min_g > self.max_g:
            raise ValueError(f"need min_g <= max_g, got min_g={self.min_g}, max_g={self.max_g}")
        if not 0 <= self.isd_max_percent <= 100:
            raise ValueError(f"isd_max_percent must be in [0, 100], got {self.isd_max_percent}")
        if self.g_sd < 0:
            raise ValueError(f"g_sd must be >= 0, got {self.g_sd}")
        if self.snr_min > self.snr_max:
            raise ValueError(f"need snr_min <= snr_max, got snr_min={self.snr_min}, snr_max={self.snr_max}")


def _uniform(rng: np.random.Generator, a: float, b: float) -> float:
    """A uniform draw between ``a`` and ``b`` in either order (numpy's ``uniform(low, high)``
    accepted ``low > high``; the Generator refuses it)."""
    low, high = (a, b) if a <= b else (b, a)
    return float(rng.uniform(low, high))


def _peak_limit(x: np.ndarray) -> np.ndarray:
    """Scale down to peak 1 when the peak exceeds 1 (the reference's ``normWav(x, 0)``)."""
    peak = float(np.max(np.abs(x))) if x.size else 0.0
    return x / peak if peak > 1.0 else x


def notch_filter_coefficients(
    rng: np.random.Generator,
    sample_rate: int,
    params: RawBoostParams,
    min_g: float,
    max_g: float,
) -> np.ndarray:
    """A random multi-band notch FIR filter (the reference's ``genNotchCoeffs``).

    ``params.n_bands`` Hamming-window band-stop filters (``scipy.signal.firwin``) with random
    centre frequency, bandwidth and odd tap count are cascaded (their taps convolved); the
    result is scaled so its peak magnitude response is a random gain in ``[min_g, max_g]`` dB.

    Returns:
        The taps, an odd-length symmetric (linear-phase) float64 array.
    """
    from scipy import signal  # imported on use: `modforge list` stays light

    nyquist = sample_rate / 2
    max_f = min(params.max_f, nyquist)
    b = np.ones(1)
    for _ in range(params.n_bands):
        fc = _uniform(rng, params.min_f, max_f)
        bw = _uniform(rng, params.min_bw, params.max_bw)
        taps = int(_uniform(rng, params.min_coeff, params.max_coeff))
        if taps % 2 == 0:
            taps += 1  # a band-stop FIR needs an odd length (type I)
        fc = min(max(fc, 2 * _EDGE_HZ), nyquist - 2 * _EDGE_HZ)  # so that f1 < fc < f2 always holds
        f1 = max(fc - bw / 2, _EDGE_HZ)
        f2 = min(fc + bw / 2, nyquist - _EDGE_HZ)
        band = signal.firwin(taps, [f1, f2], window="hamming", fs=sample_rate)
        b = np.convolve(band, b)
    gain_db = _uniform(rng, min_g, max_g)
    _, response = signal.freqz(b, 1, fs=sample_rate)
    return (10.0 ** (gain_db / 20.0)) * b / np.max(np.abs(response))


def fir_filter(x: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Filter ``x`` with linear-phase taps ``b``, delay compensated, same length as ``x``."""
    from scipy import signal

    if x.size == 0:
        return x.astype(np.float64)
    return signal.fftconvolve(x, b, mode="same")


def lnl_convolutive_noise(
    x: np.ndarray, rng: np.random.Generator, sample_rate: int, params: RawBoostParams
) -> np.ndarray:
    """Linear and non-linear convolutive noise (algorithm 1, ``LnL_convolutive_noise``).

    ``y = sum_{j=1..n_f} h_j * x**j``, each ``h_j`` a fresh random notch filter; the linear
    term's gain is drawn from ``[min_g, max_g]`` dB, the non-linear terms' from
    ``[min_g - min_bias_lin_nonlin, max_g - max_bias_lin_nonlin]`` dB. The result is
    re-centred (mean removed) and scaled down if its peak exceeds 1.
    """
    y = np.zeros(x.shape[0], dtype=np.float64)
    for order in range(1, params.n_f + 1):
        if order == 1:
            low, high = params.min_g, params.max_g
        else:
            low, high = params.min_g - params.min_bias_lin_nonlin, params.max_g - params.max_bias_lin_nonlin
        b = notch_filter_coefficients(rng, sample_rate, params, low, high)
        y = y + fir_filter(np.power(x, order), b)
    if y.size:
        y = y - np.mean(y)
    return _peak_limit(y)


def isd_additive_noise(x: np.ndarray, rng: np.random.Generator, params: RawBoostParams) -> np.ndarray:
    """Impulsive signal-dependent additive noise (algorithm 2, ``ISD_additive_noise``).

    ``beta`` is drawn from ``[0, isd_max_percent]``; ``int(len(x) * beta / 100)`` distinct
    samples at random positions get ``g_sd * x[i] * u1 * u2`` added (``u1``, ``u2`` uniform in
    ``[-1, 1]``); every other sample is untouched. Scaled down if the peak exceeds 1.
    """
    beta = _uniform(rng, 0.0, params.isd_max_percent)
    n = int(x.shape[0] * (beta / 100.0))
    y = np.array(x, dtype=np.float64, copy=True)
    positions = rng.choice(x.shape[0], size=n, replace=False) if n else np.zeros(0, dtype=np.int64)
    f_r = (2.0 * rng.random(n) - 1.0) * (2.0 * rng.random(n) - 1.0)
    y[positions] = y[positions] + params.g_sd * y[positions] * f_r
    return _peak_limit(y)


def ssi_additive_noise(x: np.ndarray, rng: np.random.Generator, sample_rate: int, params: RawBoostParams) -> np.ndarray:
    """Stationary signal-independent additive noise (algorithm 3, ``SSI_additive_noise``).

    White Gaussian noise through a random notch filter (gain ``[min_g, max_g]`` dB), scaled so
    that ``20 log10(||x|| / ||noise||)`` equals an SNR drawn from ``[snr_min, snr_max]`` dB, then
    added. A silent input gets zero noise (its SNR is undefined) and stays silent. Not
    peak-limited, as in the reference.
    """
    x = np.asarray(x, dtype=np.float64)
    noise = rng.standard_normal(x.shape[0])
    b = notch_filter_coefficients(rng, sample_rate, params, params.min_g, params.max_g)
    noise = fir_filter(noise, b)
    snr_db = _uniform(rng, params.snr_min, params.snr_max)
    noise_norm = float(np.linalg.norm(noise))
    if noise_norm == 0.0 or not np.isfinite(noise_norm):
        return x.copy()
    noise = noise / noise_norm * float(np.linalg.norm(x)) / 10.0 ** (0.05 * snr_db)
    return x + noise


def rawboost(
    x: np.ndarray,
    rng: np.random.Generator,
    algo: int,
    sample_rate: int = 16000,
    params: RawBoostParams | None = None,
) -> np.ndarray:
    """Apply RawBoost combination ``algo`` (see :data:`ALGORITHMS`) to waveform ``x``.

    Args:
        x: 1-D waveform.
        rng: the source of every random number.
        algo: 0..8, the reference's ``--algo`` (process_Rawboost_feature).
        sample_rate: sampling rate of ``x`` in Hz.
        params: the distortion parameters (reference defaults when omitted).

    Returns:
        A float64 array of the same length as ``x``.
    """
    params = params or RawBoostParams()
    x = np.asarray(x, dtype=np.float64)
    if algo not in ALGORITHMS:
        raise ValueError(f"algo must be one of {sorted(ALGORITHMS)}, got {algo!r}")

    def lnl(v: np.ndarray) -> np.ndarray:
        return lnl_convolutive_noise(v, rng, sample_rate, params)

    def isd(v: np.ndarray) -> np.ndarray:
        return isd_additive_noise(v, rng, params)

    def ssi(v: np.ndarray) -> np.ndarray:
        return ssi_additive_noise(v, rng, sample_rate, params)

    if algo == 0:
        return x.copy()
    if algo == 8:
        return _peak_limit(lnl(x) + isd(x))
    series = {1: (lnl,), 2: (isd,), 3: (ssi,), 4: (lnl, isd, ssi), 5: (lnl, isd), 6: (lnl, ssi), 7: (isd, ssi)}
    for stage in series[algo]:
        x = stage(x)
    return x
