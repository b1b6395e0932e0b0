"""Rendering a planned utterance (:mod:`.speech_synth`): the Rosenberg-C glottal source with jitter, shimmer
and breathiness, and the vocal tract — a cascade of Klatt resonators applied as a time-varying filter by
windowed overlap-add — plus the parallel fricative noise branch.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from scipy import fft as sp_fft
from scipy import signal

from .speech_channel import active_level
from .speech_phones import FRICATIVES
from .speech_plan import UtterancePlan, decimate_track, frame_hop, frames_to_samples
from .speech_speaker import Speaker

__all__ = [
    "filter_fft_size",
    "filter_hop",
    "frication_noise",
    "fricative_filters",
    "glottal_source",
    "ola_frames",
    "ola_synthesis",
    "render_tract",
    "resonator_cascade_response",
    "rosenberg_flow",
    "time_varying_filter",
]


def filter_hop(sample_rate: int) -> int:
    """Samples between updates of the time-varying filters (8 ms, two parameter frames)."""
    return 2 * frame_hop(sample_rate)


def filter_fft_size(sample_rate: int) -> int:
    """FFT length of the overlap-add filter: window (4 filter hops) + 32 ms of impulse-response tail (resonators
    with bandwidths of 50 Hz or more have decayed by > 40 dB by then), rounded up to a multiple of the hop."""
    hop = filter_hop(sample_rate)
    need = 4 * hop + int(np.ceil(0.032 * sample_rate))
    size = 1 << int(np.ceil(np.log2(need)))
    return int(np.ceil(size / hop) * hop)


def rosenberg_flow(position: np.ndarray, open_quotient: float, speed_quotient: float) -> np.ndarray:
    """Rosenberg-C glottal flow at cycle positions in [0, 1): raised-cosine opening, quarter-cosine closing."""
    t_open = open_quotient * speed_quotient / (1.0 + speed_quotient)
    t_close = open_quotient / (1.0 + speed_quotient)
    flow = np.zeros_like(position)
    opening = position < t_open
    closing = (~opening) & (position < t_open + t_close)
    flow[opening] = 0.5 * (1.0 - np.cos(np.pi * position[opening] / t_open))
    flow[closing] = np.cos(0.5 * np.pi * (position[closing] - t_open) / t_close)
    return flow


def glottal_source(
    plan: UtterancePlan,
    speaker: Speaker,
    rng: np.random.Generator,
    *,
    f0: np.ndarray | None = None,
    jitter: float | None = None,
    shimmer: float | None = None,
    breathiness: float | None = None,
) -> np.ndarray:
    """Voiced excitation plus breathiness noise, per sample, already scaled by the plan's voicing.

    ``f0`` (per frame), ``jitter``, ``shimmer`` and ``breathiness`` override the plan's / speaker's values.
    """
    sr, n = plan.sample_rate, plan.n_samples
    jitter = speaker.jitter if jitter is None else jitter
    shimmer = speaker.shimmer if shimmer is None else shimmer
    breathiness = speaker.breathiness if breathiness is None else breathiness
    f0_samples = frames_to_samples(plan.f0 if f0 is None else f0, plan.hop, n)
    phase = np.cumsum(f0_samples / sr)
    n_cycles = int(phase[-1]) + 2
    if jitter > 0:
        period_factor = 1.0 + jitter * np.clip(rng.standard_normal(n_cycles), -3.0, 3.0)
        phase = np.cumsum(f0_samples / period_factor[phase.astype(np.int64)] / sr)
        n_cycles = int(phase[-1]) + 2
    cycle = phase.astype(np.int64)
    flow = rosenberg_flow(phase - cycle, speaker.open_quotient, speaker.speed_quotient)
    if shimmer > 0:
        flow = flow * np.clip(1.0 + shimmer * rng.standard_normal(n_cycles), 0.5, 1.5)[cycle]
    excitation = np.diff(flow, prepend=0.0) * (sr / speaker.f0_mean)
    if speaker.tilt > 0:
        excitation = signal.lfilter([1.0 - speaker.tilt], [1.0, -speaker.tilt], excitation)
    voicing = frames_to_samples(plan.voicing, plan.hop, n)
    breath = breathiness * rng.standard_normal(n) * (0.25 + flow)
    return (excitation + breath) * voicing


def resonator_cascade_response(formants: np.ndarray, bandwidths: np.ndarray, sample_rate: int, nfft: int) -> np.ndarray:
    """Frequency response [frames, nfft//2+1] of a cascade of Klatt resonators (unity gain at 0 Hz).

    Each resonator is y[n] = A x[n] + B y[n-1] + C y[n-2] with C = -exp(-2π bw T), B = 2 exp(-π bw T) cos(2π f T),
    A = 1 - B - C. The cascade's denominator is the product of the resonators' polynomials, evaluated on the FFT
    grid with one real FFT per frame.
    """
    period = 1.0 / sample_rate
    n_frames = formants.shape[1]
    denominator = np.zeros((n_frames, 2 * formants.shape[0] + 1))
    denominator[:, 0] = 1.0
    gain = np.ones(n_frames)
    for k, (f, bw) in enumerate(zip(formants, bandwidths, strict=True)):
        c = -np.exp(-2.0 * np.pi * bw * period)
        b = 2.0 * np.exp(-np.pi * bw * period) * np.cos(2.0 * np.pi * f * period)
        gain *= 1.0 - b - c
        order = 2 * k  # multiply the running polynomial by (1 - b z^-1 - c z^-2)
        previous = denominator[:, : order + 1].copy()
        denominator[:, 1 : order + 2] -= b[:, None] * previous
        denominator[:, 2 : order + 3] -= c[:, None] * previous
    spectrum = sp_fft.rfft(denominator, n=nfft, axis=-1)
    return (gain[:, None] / spectrum).astype(np.complex64)


@lru_cache(maxsize=8)
def fricative_filters(sample_rate: int) -> tuple[np.ndarray, ...]:
    """Second-order sections of the parallel-branch band-pass noise shapes, one per entry of FRICATIVES."""
    nyquist = 0.5 * sample_rate
    out = []
    for low, high, gain in FRICATIVES.values():
        hi = min(high, 0.95 * nyquist)
        lo = min(low, 0.5 * hi)
        sos = signal.butter(2, [lo, hi], btype="bandpass", fs=sample_rate, output="sos")
        sos[0, :3] *= gain
        out.append(sos)
    return tuple(out)


def ola_frames(x: np.ndarray, hop: int, nfft: int) -> np.ndarray:
    """Spectra [frames, nfft//2+1] of Hann-windowed 4-hop frames centred on samples 0, hop, 2·hop, …"""
    win = 4 * hop
    n_frames = x.shape[-1] // hop + 2
    padded = np.zeros(n_frames * hop + win, dtype=np.float32)
    padded[2 * hop : 2 * hop + x.shape[-1]] = x
    frames = np.lib.stride_tricks.sliding_window_view(padded, win)[::hop][:n_frames]
    window = np.hanning(win + 1)[:-1].astype(np.float32)
    return sp_fft.rfft(frames * window, n=nfft, axis=-1)


def ola_synthesis(spectra: np.ndarray, hop: int, nfft: int, n_samples: int) -> np.ndarray:
    """Overlap-add of the filtered frames made by :func:`ola_frames`; returns ``n_samples`` samples."""
    n_frames = spectra.shape[0]
    blocks = nfft // hop
    frames = sp_fft.irfft(spectra, n=nfft, axis=-1).reshape(n_frames, blocks, hop)
    out = np.zeros((n_frames + blocks, hop), dtype=np.float32)
    for j in range(blocks):
        out[j : j + n_frames] += frames[:, j]
    # Hann windows 4 hops long at a 1-hop spacing sum to 2
    return out.reshape(-1)[2 * hop : 2 * hop + n_samples].astype(np.float64) / 2.0


def time_varying_filter(x: np.ndarray, response: np.ndarray, hop: int, nfft: int) -> np.ndarray:
    """Filter ``x`` with a per-frame frequency response [frames, nfft//2+1] by windowed overlap-add."""
    return ola_synthesis(response * ola_frames(x, hop, nfft), hop, nfft, x.shape[-1])


def frication_noise(plan: UtterancePlan, rng: np.random.Generator, scale: float = 1.0) -> np.ndarray:
    """The parallel branch: band-pass noise of each fricative type times its amplitude track."""
    n = plan.n_samples
    noise = rng.standard_normal(n)
    out = np.zeros(n)
    filters = fricative_filters(plan.sample_rate)
    for k in np.flatnonzero(plan.frication.max(axis=1) > 0):
        out += signal.sosfilt(filters[k], noise) * frames_to_samples(plan.frication[k], plan.hop, n)
    return scale * out


def render_tract(
    plan: UtterancePlan,
    source: np.ndarray,
    rng: np.random.Generator,
    *,
    formants: np.ndarray | None = None,
    bandwidths: np.ndarray | None = None,
    frication_scale: float = 1.0,
) -> np.ndarray:
    """Pass ``source`` (+ the plan's aspiration noise) through the formant cascade and add the fricative branch."""
    sr, n = plan.sample_rate, plan.n_samples
    hop, nfft = filter_hop(sr), filter_fft_size(sr)
    step = hop // plan.hop
    n_filter_frames = n // hop + 2
    aspiration = frames_to_samples(plan.aspiration, plan.hop, n) * rng.standard_normal(n)
    cascade = resonator_cascade_response(
        decimate_track(plan.formants if formants is None else formants, step, n_filter_frames),
        decimate_track(plan.bandwidths if bandwidths is None else bandwidths, step, n_filter_frames),
        sr,
        nfft,
    )
    voiced = time_varying_filter(source + aspiration, cascade, hop, nfft)
    # frication amplitudes are relative to the active level of the cascade branch (1.0 ≈ +6 dB above it)
    return voiced + frication_noise(plan, rng, 2.0 * frication_scale * active_level(voiced, sr))
