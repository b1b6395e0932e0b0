"""Spoofing attacks of the synthetic spoofing corpus: each one turns fresh bona-fide-like material of a speaker
into a spoof with a different kind of artefact, in the spirit of the ASVspoof 2019 LA attacks (Wang et al.,
"ASVspoof 2019: a large-scale public database of synthesized, converted and replayed speech", CSL 2020).

Every attack is a pure function of an :class:`~.speech_synth.UtterancePlan`, the :class:`~.speech_synth.Speaker`
and a ``numpy.random.Generator``; it returns exactly ``plan.n_samples`` samples, *before* the level normalisation
that the corpus applies to bona fide and spoofed audio alike.

==== ================ ==========================================================================================
id   name             artefact
==== ================ ==========================================================================================
A01  lpc_vocoder      LPC analysis (order 8–12 at 16 kHz, 8 ms frames) of the bona fide take, resynthesis with a
                      hard voiced/unvoiced switch between a jitter-free, pulse-dispersed impulse train and white
                      noise — buzzy, perfectly periodic source, all-pole-smoothed envelope
A02  mel_griffin_lim  Tacotron-1-style back end: the power mel spectrogram (40–80 bands, 64 ms frames) spread back
                      to linear frequency and a phase rebuilt by 1–4 Griffin-Lim iterations from random phase —
                      smeared high band, phasiness
A03  telephone_codec  band-limited to 300–3400 Hz at 8 kHz and G.711-like 7/8-bit μ-law quantised, upsampled back
A04  monotone_tts     re-rendered with a nearly flat F0 and no jitter, little breathiness and over-smoothed formant
                      and energy tracks (the "statistical parametric TTS" look)
A05  splice           partial spoof: a run of 30–60 % of the syllables of a bona fide take replaced by an A01-style
                      LPC-vocoded version, joined with 5 ms cross-fades and a ±1.5 dB level step
A06  mdct_codec       coarse MDCT transform coding: per-band scale factors, 0–6-bit uniform quantisation, bands
                      under a masking-like threshold zeroed (spectral holes), top 10–28 % of the band dropped
A07  hnm_vocoder      harmonic-plus-noise vocoder: band-limited harmonic comb up to a 2.8–4.8 kHz maximum voiced
                      frequency with fixed phase dispersion, noise above it, smooth F0, driven by the true formant
                      envelope (as if predicted by an acoustic model)
==== ================ ==========================================================================================

The corpus uses A01–A04 for train and dev and A01, A02, A05, A06, A07 for eval, so A05–A07 are unseen
(see :mod:`.spoof_corpus`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from math import gcd

import numpy as np
from scipy import fft as sp_fft
from scipy import signal

from . import speech_synth as ss


@dataclass(frozen=True)
class Attack:
    """One spoofing attack.

    Args:
        attack_id: ASVspoof-style id, e.g. ``"A01"``.
        name: short name.
        description: what the attack does and which artefact it leaves.
        render: ``render(plan, speaker, rng) -> waveform`` with ``plan.n_samples`` samples.
    """

    attack_id: str
    name: str
    description: str
    render: Callable[[ss.UtterancePlan, ss.Speaker, np.random.Generator], np.ndarray]


# ----------------------------------------------------------------------------------------------- STFT helpers


def _stft_size(sample_rate: int, seconds: float = 0.032) -> int:
    return 1 << round(np.log2(seconds * sample_rate))


def stft(x: np.ndarray, nfft: int, hop: int) -> np.ndarray:
    """Hann-window STFT [frames, nfft//2+1] with frames centred on 0, hop, 2·hop, … (zero padding at the ends)."""
    n_frames = x.shape[-1] // hop + 1
    padded = np.zeros((n_frames - 1) * hop + nfft, dtype=np.float64)
    padded[nfft // 2 : nfft // 2 + x.shape[-1]] = x
    frames = np.lib.stride_tricks.sliding_window_view(padded, nfft)[::hop][:n_frames]
    return sp_fft.rfft(frames * np.hanning(nfft + 1)[:-1], axis=-1)


def istft(spectra: np.ndarray, nfft: int, hop: int, n_samples: int) -> np.ndarray:
    """Least-squares inverse of :func:`stft` (windowed overlap-add divided by the summed squared window)."""
    window = np.hanning(nfft + 1)[:-1]
    frames = sp_fft.irfft(spectra, n=nfft, axis=-1) * window
    n_frames = frames.shape[0]
    blocks = nfft // hop
    out = np.zeros((n_frames + blocks, hop))
    norm = np.zeros((n_frames + blocks, hop))
    frames = frames.reshape(n_frames, blocks, hop)
    w2 = (window**2).reshape(blocks, hop)
    for j in range(blocks):
        out[j : j + n_frames] += frames[:, j]
        norm[j : j + n_frames] += w2[j]
    out = out.reshape(-1)[nfft // 2 : nfft // 2 + n_samples]
    return out / np.maximum(norm.reshape(-1)[nfft // 2 : nfft // 2 + n_samples], 1e-8)


# ------------------------------------------------------------------------------------------------ LPC helpers


def levinson(autocorr: np.ndarray, order: int) -> tuple[np.ndarray, np.ndarray]:
    """Levinson-Durbin recursion over rows: predictor polynomials [frames, order+1] (a0 = 1) and residual power."""
    n_frames = autocorr.shape[0]
    a = np.zeros((n_frames, order + 1))
    a[:, 0] = 1.0
    error = autocorr[:, 0].copy()
    for i in range(1, order + 1):
        acc = autocorr[:, i] + np.sum(a[:, 1:i] * autocorr[:, i - 1 : 0 : -1], axis=1)
        k = -acc / error
        a[:, 1:i] = a[:, 1:i] + k[:, None] * a[:, i - 1 : 0 : -1]
        a[:, i] = k
        error = error * (1.0 - k**2)
    return a, error


def lpc_analysis(x: np.ndarray, hop: int, order: int, sample_rate: int) -> tuple[np.ndarray, np.ndarray]:
    """Frame-wise LPC (Hann frames of 6 hops centred on multiples of ``hop``): polynomials and gains."""
    win = 6 * hop
    n_frames = x.shape[-1] // hop + 2
    padded = np.zeros(n_frames * hop + win, dtype=np.float32)
    padded[win // 2 : win // 2 + x.shape[-1]] = x
    window = np.hanning(win + 1)[:-1]
    frames = np.lib.stride_tricks.sliding_window_view(padded, win)[::hop][:n_frames] * window.astype(np.float32)
    size = 1 << int(np.ceil(np.log2(win + order + 1)))  # long enough for linear (not circular) lags <= order
    power = np.abs(sp_fft.rfft(frames, n=size, axis=-1)) ** 2
    autocorr = sp_fft.irfft(power, n=size, axis=-1)[:, : order + 1].astype(np.float64)
    lag = np.arange(order + 1) / sample_rate
    autocorr = autocorr * np.exp(-0.5 * (2.0 * np.pi * 60.0 * lag) ** 2)  # 60 Hz lag window
    autocorr[:, 0] = autocorr[:, 0] * (1.0 + 1e-4) + 1e-10
    a, error = levinson(autocorr, order)
    gain = np.sqrt(np.maximum(error, 0.0) / np.sum(window**2))
    return a, gain


def pulse_train(f0_frames: np.ndarray, hop: int, n_samples: int, sample_rate: int) -> np.ndarray:
    """Jitter-free unit-power impulse train following an F0 track (one impulse per cycle)."""
    f0 = ss.frames_to_samples(f0_frames, hop, n_samples)
    cycle = np.floor(np.cumsum(f0 / sample_rate))
    pulses = np.zeros(n_samples)
    starts = np.flatnonzero(np.diff(cycle, prepend=0.0) > 0)
    pulses[starts] = np.sqrt(sample_rate / f0[starts])
    return pulses


def dispersion_filter(sample_rate: int, spread: float, rng: np.random.Generator) -> np.ndarray:
    """Unit-energy FIR with a flat magnitude response and a random, smooth group delay in [0, ``spread``] seconds —
    a pulse-dispersion filter as in MELP: it spreads each excitation pulse over a few ms so that the vocoded
    waveform is no peakier than reverberant natural speech, leaving the harmonic magnitudes unchanged."""
    delay = spread * sample_rate
    size = 1 << int(np.ceil(np.log2(2.0 * delay + 32)))
    bins = size // 2 + 1
    group_delay = ss.smooth_track(rng.uniform(0.0, delay, bins), 9)  # samples, per frequency bin
    phase = -2.0 * np.pi * np.cumsum(group_delay) / size
    return sp_fft.irfft(np.exp(1j * phase), n=size)  # exactly flat on the size-point grid, unit energy


def lpc_vocode(
    material: np.ndarray,
    plan: ss.UtterancePlan,
    rng: np.random.Generator,
    order: int,
    noise_mix: float = 0.0,
    frame_hops: int = 1,
) -> np.ndarray:
    """Resynthesise ``material`` from its LPC envelope (analysed every ``frame_hops`` plan frames) with a hard
    voiced/unvoiced switch between a jitter-free, pulse-dispersed impulse train and white noise (``noise_mix`` of
    noise in voiced frames)."""
    sr, n = plan.sample_rate, plan.n_samples
    hop = plan.hop * frame_hops
    emphasised = signal.lfilter([1.0, -0.97], [1.0], material)
    a, gain = lpc_analysis(emphasised, hop, order, sr)
    f0 = ss.smooth_track(plan.f0, max(3, round(0.04 * sr / plan.hop)))[::frame_hops]
    voiced = ss.frames_to_samples((plan.voicing[::frame_hops] > 0.25).astype(float), hop, n) * (1.0 - noise_mix)
    pulses = signal.oaconvolve(pulse_train(f0, hop, n, sr), dispersion_filter(sr, rng.uniform(0.01, 0.015), rng))[:n]
    excitation = np.sqrt(voiced) * pulses + np.sqrt(1.0 - voiced) * rng.standard_normal(n)
    nfft = int(np.ceil(ss.filter_fft_size(sr) / hop) * hop)
    response = (gain[:, None] / sp_fft.rfft(a, n=nfft, axis=-1)).astype(np.complex64)
    out = ss.time_varying_filter(excitation, response[: n // hop + 2], hop, nfft)
    return signal.lfilter([1.0], [1.0, -0.97], out)


# --------------------------------------------------------------------------------------------------- attacks


def lpc_vocoder(plan: ss.UtterancePlan, speaker: ss.Speaker, rng: np.random.Generator) -> np.ndarray:
    """A01: LPC analysis/resynthesis of a bona fide take with a buzzy, jitter-free excitation."""
    material = ss.synthesize(plan, speaker, rng)
    order = int(rng.integers(8, 13)) * plan.sample_rate // 16000
    return lpc_vocode(material, plan, rng, order, noise_mix=float(rng.uniform(0.0, 0.1)), frame_hops=2)


@lru_cache(maxsize=16)
def mel_filterbank(sample_rate: int, nfft: int, n_mels: int) -> np.ndarray:
    """Triangular HTK-mel filterbank [n_mels, nfft//2+1] (peaks 1, adjacent triangles sum to 1 between centres)."""
    top = 2595.0 * np.log10(1.0 + 0.5 * sample_rate / 700.0)
    edges = 700.0 * (10.0 ** (np.linspace(0.0, top, n_mels + 2) / 2595.0) - 1.0)
    freqs = np.arange(nfft // 2 + 1) * sample_rate / nfft
    lower, centre, upper = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    bank = np.clip(np.minimum((freqs - lower) / (centre - lower), (upper - freqs) / (upper - centre)), 0.0, None)
    bank.setflags(write=False)
    return bank


def mel_griffin_lim(plan: ss.UtterancePlan, speaker: ss.Speaker, rng: np.random.Generator) -> np.ndarray:
    """A02: a Tacotron-1-style back end — the bona fide take's power mel spectrogram, spread back onto the linear
    frequency grid, and a phase rebuilt from random phase by a few Griffin-Lim iterations."""
    material = ss.synthesize(plan, speaker, rng)
    sr, n = plan.sample_rate, plan.n_samples
    nfft = _stft_size(sr, 0.064)
    hop = nfft // 4
    bank = mel_filterbank(sr, nfft, int(rng.integers(40, 81)))
    mel = np.abs(stft(material, nfft, hop)) ** 2 @ bank.T / bank.sum(axis=1)  # mean power density per band
    magnitude = np.sqrt(mel @ bank)  # piecewise-linear interpolation of the band densities
    phase = np.exp(2j * np.pi * rng.random(magnitude.shape))
    for _ in range(int(rng.integers(1, 5))):
        rebuilt = stft(istft(magnitude * phase, nfft, hop, n), nfft, hop)
        phase = rebuilt / np.maximum(np.abs(rebuilt), 1e-12)
    return istft(magnitude * phase, nfft, hop, n)


def telephone_line(x: np.ndarray, sample_rate: int, rng: np.random.Generator) -> np.ndarray:
    """An 8 kHz telephone line: 300–3400 Hz band, a random line level and 7- or 8-bit μ-law
    companding, back at ``sample_rate`` (the same length within a sample or two)."""
    narrow_rate = 8000
    g = gcd(sample_rate, narrow_rate)
    narrow = signal.resample_poly(x, narrow_rate // g, sample_rate // g)
    band = signal.butter(4, [300.0, 3400.0], btype="bandpass", fs=narrow_rate, output="sos")
    narrow = signal.sosfilt(band, narrow)
    narrow *= 10.0 ** (rng.uniform(-22.0, -14.0) / 20.0) / max(ss.active_level(narrow, narrow_rate), 1e-12)
    mu = 255.0
    levels = 2 ** (int(rng.integers(7, 9)) - 1) - 1
    companded = np.sign(narrow) * np.log1p(mu * np.minimum(np.abs(narrow), 1.0)) / np.log1p(mu)
    companded = np.round(companded * levels) / levels
    narrow = np.sign(companded) * np.expm1(np.abs(companded) * np.log1p(mu)) / mu
    return signal.resample_poly(narrow, sample_rate // g, narrow_rate // g)


def telephone_codec(plan: ss.UtterancePlan, speaker: ss.Speaker, rng: np.random.Generator) -> np.ndarray:
    """A03: 8 kHz telephone band (300–3400 Hz) and 8-bit μ-law companding, back to the corpus rate."""
    material = ss.synthesize(plan, speaker, rng)
    return _fit_length(telephone_line(material, plan.sample_rate, rng), plan.n_samples)


def monotone_tts(plan: ss.UtterancePlan, speaker: ss.Speaker, rng: np.random.Generator) -> np.ndarray:
    """A04: re-render the plan with a nearly flat F0 (the loudness contour kept), no jitter, little breathiness
    and over-smoothed formant and energy tracks."""
    hop = plan.hop
    voiced = plan.voicing > 0.2
    centre = float(np.median(plan.f0[voiced])) if voiced.any() else speaker.f0_mean
    keep = rng.uniform(0.0, 0.15)  # a trace of the original contour survives
    smooth = max(3, round(rng.uniform(0.16, 0.24) * plan.sample_rate / hop))
    energy_smooth = max(3, round(rng.uniform(0.06, 0.1) * plan.sample_rate / hop))
    f0 = centre * (plan.f0 / centre) ** keep
    # the excitation's amplitude grows with F0: keep the original loudness contour while flattening the pitch
    voicing = ss.smooth_track(plan.voicing * plan.f0 / f0, energy_smooth)
    flat = replace(
        plan,
        f0=f0,
        voicing=voicing * (plan.voicing.max() / max(voicing.max(), 1e-9)),  # smoothed, same peak
        aspiration=ss.smooth_track(plan.aspiration, energy_smooth),
        frication=ss.smooth_track(plan.frication, energy_smooth),
        formants=ss.smooth_track(plan.formants, smooth),
        bandwidths=ss.smooth_track(plan.bandwidths, smooth),
    )
    source = ss.glottal_source(flat, speaker, rng, jitter=0.0, breathiness=0.1 * speaker.breathiness)
    return ss.apply_channel(ss.render_tract(flat, source, rng), speaker, plan.sample_rate, rng)


def splice(plan: ss.UtterancePlan, speaker: ss.Speaker, rng: np.random.Generator) -> np.ndarray:
    """A05: partial spoof — runs of syllables of a bona fide take swapped for an LPC-vocoded version of it."""
    material = ss.synthesize(plan, speaker, rng)
    order = int(rng.integers(8, 13)) * plan.sample_rate // 16000
    vocoded = lpc_vocode(material, plan, rng, order, noise_mix=float(rng.uniform(0.0, 0.1)), frame_hops=2)
    n_syl = len(plan.syllables)
    mask = np.zeros(plan.n_samples)
    share = rng.uniform(0.3, 0.6)
    count = max(1, round(share * n_syl))
    first = int(rng.integers(0, n_syl - count + 1))
    start = plan.syllables[first][0]
    end = plan.syllables[first + count - 1][1] if first + count < n_syl else plan.n_samples
    mask[start:end] = 1.0
    fade = max(1, int(0.005 * plan.sample_rate))
    mask = np.convolve(mask, np.ones(fade) / fade, mode="same")
    step = 10.0 ** (rng.uniform(-1.5, 1.5) / 20.0)  # level mismatch at the joins
    return (1.0 - mask) * material + mask * step * vocoded


def _band_edges(half: int, sample_rate: int) -> np.ndarray:
    """MDCT bin indices of ~critical bands (Bark-like: 100 Hz wide up to 500 Hz, then 20 % of the centre)."""
    hz_per_bin = 0.5 * sample_rate / half
    edges = [0.0]
    while edges[-1] < 0.5 * sample_rate:
        edges.append(edges[-1] + max(100.0, 0.2 * edges[-1]))
    bins = np.unique(np.clip(np.round(np.array(edges) / hz_per_bin), 0, half).astype(int))
    return bins


@lru_cache(maxsize=8)
def _mdct_basis(half: int) -> tuple[np.ndarray, np.ndarray]:
    """Sine window [2·half] and MDCT basis [2·half, half]: X[k] = sum_m x[m] cos(π/N (m + 1/2 + N/2)(k + 1/2))."""
    size = 2 * half
    m = np.arange(size)
    window = np.sin(np.pi * (m + 0.5) / size)
    basis = np.cos(np.pi / half * (m[:, None] + 0.5 + half / 2) * (np.arange(half)[None, :] + 0.5))
    window.setflags(write=False)
    basis.setflags(write=False)
    return window, basis


def mdct_codec(plan: ss.UtterancePlan, speaker: ss.Speaker, rng: np.random.Generator) -> np.ndarray:
    """A06: sine-window MDCT (TDAC), per-band scale factors, few-bit quantisation, zeroed bands, no high band."""
    material = ss.synthesize(plan, speaker, rng)
    sr, n = plan.sample_rate, plan.n_samples
    half = _stft_size(sr, 0.016)  # 256 coefficients per frame at 16 kHz
    size = 2 * half
    n_frames = int(np.ceil(n / half)) + 1
    padded = np.zeros((n_frames + 1) * half)
    padded[half : half + n] = material
    frames = np.lib.stride_tricks.sliding_window_view(padded, size)[::half][:n_frames]
    window, basis = _mdct_basis(half)
    m = np.arange(size)
    coeffs = (frames * window) @ basis
    edges = _band_edges(half, sr)
    cutoff = int(half * rng.uniform(0.72, 0.9))
    band_energy = np.stack(
        [np.sqrt(np.mean(coeffs[:, a:b] ** 2, axis=1) + 1e-20) for a, b in zip(edges[:-1], edges[1:], strict=True)],
        axis=1,
    )
    band_db = 20.0 * np.log10(band_energy)
    # masking-like threshold: below the frame's strongest band, and never below the utterance's loudest - 70 dB
    threshold = np.maximum(band_db.max(axis=1, keepdims=True) - rng.uniform(30.0, 42.0), band_db.max() - 70.0)
    bits = np.clip(np.floor((band_db - threshold) * rng.uniform(0.12, 0.2)), 0, 6)
    quantised = np.zeros_like(coeffs)
    for j, (a, b) in enumerate(zip(edges[:-1], edges[1:], strict=True)):
        if a >= cutoff:
            break
        scale = np.abs(coeffs[:, a:b]).max(axis=1, keepdims=True) + 1e-20
        levels = 2.0 ** bits[:, j : j + 1] - 1.0
        q = np.round(coeffs[:, a:b] / scale * levels) / np.maximum(levels, 1.0) * scale
        quantised[:, a:b] = np.where(levels > 0, q, 0.0)
    quantised[:, cutoff:] = 0.0  # the high band is not coded
    out_frames = (quantised @ basis.T) * window * (2.0 / half)
    out = np.zeros((n_frames + 1) * half)
    for f in range(2):  # TDAC overlap-add, in two passes of non-overlapping frames
        sel = out_frames[f::2]
        starts = np.arange(f, n_frames, 2) * half
        block = np.zeros((n_frames + 1) * half)
        flat = sel.reshape(-1)
        idx = (starts[:, None] + m[None, :]).reshape(-1)
        block[idx] = flat
        out += block
    return out[half : half + n]


def hnm_vocoder(plan: ss.UtterancePlan, speaker: ss.Speaker, rng: np.random.Generator) -> np.ndarray:
    """A07: harmonic-plus-noise resynthesis from the plan's smoothed F0 and its formant envelope: harmonics up to a
    maximum voiced frequency, noise above it, then the speaker's channel."""
    sr, hop, n = plan.sample_rate, plan.hop, plan.n_samples
    f0 = ss.frames_to_samples(ss.smooth_track(plan.f0, max(3, round(0.03 * sr / hop))), hop, n)
    mvf = rng.uniform(2800.0, 4800.0) * sr / 16000.0  # maximum voiced frequency
    harmonics = np.maximum(np.floor(mvf / f0), 1.0)
    phase = 2.0 * np.pi * np.cumsum(f0 / sr)
    half = 0.5 * phase
    denom = np.sin(half)
    safe = np.abs(denom) > 1e-6
    # sum_{k=1}^{K} cos(k·phase) in closed form (Dirichlet kernel): a band-limited harmonic comb, then a fixed
    # phase dispersion so that the waveform is no peakier than natural speech
    comb = np.where(safe, (np.sin((harmonics + 0.5) * phase) / np.where(safe, denom, 1.0) - 1.0) * 0.5, harmonics)
    comb *= np.sqrt(2.0 / harmonics)
    voicing = ss.frames_to_samples(plan.voicing, hop, n)
    tilt = rng.uniform(0.6, 0.85)
    comb = signal.oaconvolve(comb, dispersion_filter(sr, rng.uniform(0.01, 0.015), rng))[:n]
    harmonic = signal.lfilter([1.0 - tilt], [1.0, -tilt], comb) * 6.0 * voicing
    highpass = signal.butter(4, min(mvf, 0.45 * sr), btype="highpass", fs=sr, output="sos")
    upper = signal.sosfilt(highpass, rng.standard_normal(n)) * voicing * rng.uniform(0.2, 0.5)
    dry = ss.render_tract(plan, harmonic + upper, rng)
    return ss.apply_channel(dry, speaker, sr, rng)


def _fit_length(x: np.ndarray, n: int) -> np.ndarray:
    return x[:n] if x.shape[-1] >= n else np.pad(x, (0, n - x.shape[-1]))


ATTACKS: dict[str, Attack] = {
    a.attack_id: a
    for a in (
        Attack(
            "A01",
            "lpc_vocoder",
            "LPC vocoder: order-8-12 all-pole envelope of a bona fide take (8 ms frames) re-excited by a jitter-free, "
            "pulse-dispersed impulse train (voiced) or white noise (unvoiced): buzzy source, smoothed envelope",
            lpc_vocoder,
        ),
        Attack(
            "A02",
            "mel_griffin_lim",
            "Tacotron-1-style back end: 40-80-band power mel spectrogram of a bona fide take spread back to linear "
            "frequency, phase rebuilt by 1-4 Griffin-Lim iterations from random phase: smeared highs, phasiness",
            mel_griffin_lim,
        ),
        Attack(
            "A03",
            "telephone_codec",
            "telephone channel: band-limited to 300-3400 Hz at 8 kHz and 7/8-bit mu-law (G.711-like) quantised, "
            "then upsampled: no high band, companding noise",
            telephone_codec,
        ),
        Attack(
            "A04",
            "monotone_tts",
            "pitch flattening: re-rendered with a nearly flat F0 and no jitter, little breathiness and "
            "over-smoothed formant and energy tracks (statistical-parametric-TTS look)",
            monotone_tts,
        ),
        Attack(
            "A05",
            "splice",
            "partial spoof: a run of 30-60% of the syllables of a bona fide take replaced by an A01-style "
            "LPC-vocoded version, 5 ms cross-fades and a small level step at the joins",
            splice,
        ),
        Attack(
            "A06",
            "mdct_codec",
            "coarse MDCT transform coding: per-band scale factors, 0-6 bit quantisation, bands below a "
            "masking-like threshold zeroed (spectral holes), top 10-28% of the band dropped",
            mdct_codec,
        ),
        Attack(
            "A07",
            "hnm_vocoder",
            "harmonic-plus-noise vocoder: band-limited harmonic comb up to a 2.8-4.8 kHz maximum voiced frequency "
            "with fixed phase dispersion, noise above it, smooth F0, driven by the true formant envelope",
            hnm_vocoder,
        ),
    )
}
