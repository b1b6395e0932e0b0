"""A small source-filter voice model that makes speech-like "bona fide" audio for the synthetic spoofing corpus.

Why: spoofing-countermeasure code needs audio with the structure that detectors exploit — harmonic voicing from
a glottal source, formant resonances that move, noise consonants, syllable rhythm, a recording channel — without
shipping a real speech corpus. This module is the *bona fide* side; ``spoof_attacks`` derives the spoofs from it.

The model is a Klatt-style formant synthesiser (Klatt, "Software for a cascade/parallel formant synthesizer",
JASA 1980):

* **Source**: a Rosenberg-C glottal pulse train (Rosenberg, JASA 1971) whose period follows an F0 contour with
  per-cycle **jitter** and per-cycle amplitude **shimmer**; the flow derivative (glottal excitation with lip
  radiation) gets a speaker-specific spectral tilt and pitch-synchronous **breathiness** noise.
* **Prosody**: F0 per speaker (mean, range), with **declination**, pitch accents on stressed syllables, a final
  fall or rise, and slow drift; amplitude follows a syllable rhythm with stress.
* **Tract**: a cascade of four 2nd-order resonators (F1–F4, Klatt's difference equation) whose frequencies move
  between vowel targets (approximate adult-male averages after Hillenbrand et al., JASA 1995) and consonant loci,
  scaled by a per-speaker **vocal-tract-length** factor and a per-speaker accent. The time-varying cascade is
  applied by windowed overlap-add: every 8 ms a 32 ms frame is filtered with the exact frequency response of the
  cascade for that frame's formants (FFT long enough that the resonators' impulse responses do not wrap), and
  frames are cross-faded — Klatt's scheme of updating the synthesiser every few ms, vectorised with numpy.
* **Consonants**: a parallel noise branch with band-pass fricative spectra (s, sh, f and stop bursts), stop
  closures (silence or a voice bar), aspiration noise through the cascade, nasals and approximants.
* **Channel**: a per-speaker recording set-up — a synthetic room impulse response (early reflections plus an
  exponentially decaying diffuse tail), microphone high-pass and a mild random EQ — plus a background noise floor
  at a per-utterance SNR.

Everything random is drawn from a ``numpy.random.Generator`` handed in by the caller, so an utterance is a pure
function of its generator's seed.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import fft as sp_fft
from scipy import signal

# Adult-male formant targets F1..F4 in Hz (F1–F3 roughly Hillenbrand et al. 1995; F4 set near 3.5 kHz).
VOWELS: dict[str, tuple[float, float, float, float]] = {
    "i": (342.0, 2322.0, 3000.0, 3660.0),
    "I": (427.0, 2034.0, 2684.0, 3600.0),
    "e": (476.0, 2089.0, 2691.0, 3600.0),
    "E": (580.0, 1799.0, 2605.0, 3550.0),
    "ae": (588.0, 1952.0, 2601.0, 3550.0),
    "a": (768.0, 1333.0, 2522.0, 3500.0),
    "O": (652.0, 997.0, 2538.0, 3450.0),
    "o": (497.0, 910.0, 2459.0, 3400.0),
    "U": (469.0, 1122.0, 2434.0, 3400.0),
    "u": (378.0, 997.0, 2343.0, 3350.0),
    "V": (623.0, 1200.0, 2550.0, 3500.0),
    "3": (474.0, 1379.0, 1710.0, 3350.0),
}
VOWEL_NAMES: tuple[str, ...] = tuple(VOWELS)
_VOWEL_BANDWIDTHS = np.array([70.0, 90.0, 140.0, 220.0])

# Consonant formant loci / targets (adult male), bandwidths are widened for nasals.
_LOCI: dict[str, tuple[float, float, float, float]] = {
    "labial": (250.0, 850.0, 2300.0, 3400.0),
    "alveolar": (300.0, 1750.0, 2650.0, 3500.0),
    "velar": (300.0, 2000.0, 2300.0, 3400.0),
    "postalveolar": (300.0, 1900.0, 2500.0, 3500.0),
    "nasal_m": (260.0, 1050.0, 2250.0, 3300.0),
    "nasal_n": (260.0, 1550.0, 2600.0, 3400.0),
    "l": (360.0, 1300.0, 2700.0, 3500.0),
    "r": (420.0, 1300.0, 1650.0, 3300.0),
    "w": (300.0, 720.0, 2200.0, 3300.0),
    "j": (280.0, 2200.0, 2950.0, 3600.0),
}

# Parallel-branch noise sources: name → (low edge Hz, high edge Hz, relative amplitude) at 16 kHz.
FRICATIVES: dict[str, tuple[float, float, float]] = {
    "s": (3800.0, 7600.0, 1.0),
    "sh": (2000.0, 5200.0, 1.0),
    "f": (1200.0, 7600.0, 0.35),
    "burst_labial": (400.0, 2500.0, 1.0),
    "burst_alveolar": (2800.0, 7000.0, 1.0),
    "burst_velar": (1400.0, 3200.0, 1.0),
}
FRICATIVE_NAMES: tuple[str, ...] = tuple(FRICATIVES)

_STOPS = {"p": "labial", "t": "alveolar", "k": "velar", "b": "labial", "d": "alveolar", "g": "velar"}
_ONSETS: tuple[tuple[str, float], ...] = (
    ("none", 0.16),
    ("p", 0.06),
    ("t", 0.08),
    ("k", 0.06),
    ("b", 0.05),
    ("d", 0.06),
    ("g", 0.04),
    ("s", 0.08),
    ("sh", 0.04),
    ("f", 0.05),
    ("z", 0.03),
    ("v", 0.03),
    ("h", 0.04),
    ("m", 0.06),
    ("n", 0.06),
    ("l", 0.05),
    ("r", 0.04),
    ("w", 0.03),
    ("j", 0.02),
)
_CODAS: tuple[tuple[str, float], ...] = (
    ("none", 0.55),
    ("t", 0.08),
    ("k", 0.05),
    ("s", 0.09),
    ("n", 0.09),
    ("m", 0.05),
    ("l", 0.05),
    ("r", 0.04),
)


def frame_hop(sample_rate: int) -> int:
    """Samples between parameter frames (4 ms)."""
    return max(8, round(sample_rate * 0.004))


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


def decimate_track(track: np.ndarray, step: int, n_frames: int) -> np.ndarray:
    """Every ``step``-th frame of a track, padded with its last frame to ``n_frames`` frames."""
    out = track[..., ::step][..., :n_frames]
    if out.shape[-1] < n_frames:
        pad = [(0, 0)] * (out.ndim - 1) + [(0, n_frames - out.shape[-1])]
        out = np.pad(out, pad, mode="edge")
    return out


@dataclass(frozen=True)
class Speaker:
    """One synthetic talker: the voice-source, prosody, vocal-tract and channel settings shared by its utterances.

    Args:
        speaker_id: identifier written to the protocols.
        sex: ``"female"`` or ``"male"`` (sets the F0 and vocal-tract-length ranges).
        f0_mean: mean fundamental frequency in Hz.
        f0_range: size of pitch accents in semitones.
        declination: F0 drop over the utterance in semitones per second.
        vtl_scale: formant scale factor (shorter vocal tract → larger, e.g. ~1.17 for adult women).
        open_quotient: open phase of the glottal cycle as a fraction of the period.
        speed_quotient: opening / closing duration ratio of the glottal pulse.
        jitter: relative standard deviation of the glottal period from cycle to cycle.
        shimmer: relative standard deviation of the cycle amplitude.
        breathiness: level of pitch-synchronous aspiration noise in voiced speech.
        tilt: pole of the one-pole source low-pass (extra spectral tilt, 0 = none).
        rate: speaking rate in syllables per second.
        bandwidth_scale: multiplier of the formant bandwidths.
        accent: per-vowel formant multipliers (len(VOWELS) × 3 values for F1..F3), the speaker's "accent".
        channel_seed: seed of the speaker's recording channel (room, microphone, EQ).
    """

    speaker_id: str
    sex: str
    f0_mean: float
    f0_range: float
    declination: float
    vtl_scale: float
    open_quotient: float
    speed_quotient: float
    jitter: float
    shimmer: float
    breathiness: float
    tilt: float
    rate: float
    bandwidth_scale: float
    accent: tuple[float, ...]
    channel_seed: int


def make_speaker(speaker_id: str, rng: np.random.Generator, sex: str | None = None) -> Speaker:
    """Draw a random speaker (``sex`` chosen at random unless given)."""
    if sex is None:
        sex = "female" if rng.random() < 0.5 else "male"
    if sex not in ("female", "male"):
        raise ValueError(f"sex must be 'female' or 'male', got {sex!r}")
    female = sex == "female"
    return Speaker(
        speaker_id=speaker_id,
        sex=sex,
        f0_mean=float(rng.uniform(165.0, 255.0) if female else rng.uniform(85.0, 150.0)),
        f0_range=float(rng.uniform(1.5, 5.0)),
        declination=float(rng.uniform(0.5, 2.5)),
        vtl_scale=float(rng.uniform(1.08, 1.26) if female else rng.uniform(0.9, 1.06)),
        open_quotient=float(rng.uniform(0.45, 0.75)),
        speed_quotient=float(rng.uniform(1.5, 3.5)),
        jitter=float(rng.uniform(0.004, 0.02)),
        shimmer=float(rng.uniform(0.03, 0.10)),
        breathiness=float(rng.uniform(0.04, 0.35) * (1.3 if female else 1.0)),
        tilt=float(rng.uniform(0.0, 0.3)),
        rate=float(rng.uniform(3.5, 6.0)),
        bandwidth_scale=float(rng.uniform(0.8, 1.35)),
        accent=tuple(float(v) for v in rng.uniform(0.93, 1.07, size=len(VOWELS) * 3)),
        channel_seed=int(rng.integers(0, 2**31 - 1)),
    )


@dataclass
class UtterancePlan:
    """Frame-level control tracks of one utterance (frames every ``hop`` samples, frame ``t`` centred on
    sample ``t * hop``); rendering them with different sources or settings gives time-aligned versions.

    Args:
        sample_rate: samples per second.
        n_samples: length of the rendered waveform.
        hop: samples between frames.
        f0: fundamental frequency per frame in Hz (defined everywhere, used where voiced).
        voicing: amplitude of the voiced source per frame.
        aspiration: amplitude of aspiration noise fed to the cascade per frame.
        frication: parallel-branch noise amplitude per fricative type and frame, [len(FRICATIVES), frames].
        formants: F1..F4 per frame in Hz plus the fixed higher poles F5, F6, [6, frames].
        bandwidths: B1..B6 per frame in Hz, [6, frames].
        syllables: (start, end) sample spans of the syllables, in order.
    """

    sample_rate: int
    n_samples: int
    hop: int
    f0: np.ndarray
    voicing: np.ndarray
    aspiration: np.ndarray
    frication: np.ndarray
    formants: np.ndarray
    bandwidths: np.ndarray
    syllables: list[tuple[int, int]]

    @property
    def n_frames(self) -> int:
        return int(self.f0.shape[0])


def _choose(rng: np.random.Generator, table: tuple[tuple[str, float], ...]) -> str:
    names = [name for name, _ in table]
    weights = np.array([w for _, w in table])
    return names[int(rng.choice(len(names), p=weights / weights.sum()))]


def smooth_track(track: np.ndarray, width: int) -> np.ndarray:
    """Moving average along the last axis with edge padding (width in frames, odd)."""
    if width <= 1:
        return track
    width = width | 1
    pad = width // 2
    padded = np.pad(track, [(0, 0)] * (track.ndim - 1) + [(pad, pad)], mode="edge")
    kernel = np.ones(width) / width
    if track.ndim == 1:
        return np.convolve(padded, kernel, mode="valid")
    return np.stack([np.convolve(row, kernel, mode="valid") for row in padded])


class _Painter:
    """Accumulates phone targets and amplitude shapes on the frame grid."""

    def __init__(self, n_frames: int, hop: int, sample_rate: int) -> None:
        self.times = np.arange(n_frames) * hop / sample_rate
        self.voicing = np.zeros(n_frames)
        self.aspiration = np.zeros(n_frames)
        self.frication = np.zeros((len(FRICATIVES), n_frames))
        self.anchor_t: list[float] = []
        self.anchor_f: list[np.ndarray] = []
        self.anchor_b: list[np.ndarray] = []
        self.accents: list[tuple[float, float, float]] = []  # (centre s, width s, height in range units)
        self.dips: list[tuple[float, float]] = []  # microprosodic F0 dips (centre, width)

    def ramp(self, start: float, end: float, ramp: float = 0.012) -> np.ndarray:
        """Trapezoid 0→1→0 with linear ramps centred on the boundaries (neighbours sum to one)."""
        t = self.times
        return np.clip(np.minimum(t - start + ramp / 2, end + ramp / 2 - t) / ramp, 0.0, 1.0)

    def anchor(self, when: float, formants: np.ndarray, bandwidths: np.ndarray) -> None:
        self.anchor_t.append(when)
        self.anchor_f.append(formants)
        self.anchor_b.append(bandwidths)


def _vowel_formants(speaker: Speaker, vowel: str) -> np.ndarray:
    idx = VOWEL_NAMES.index(vowel)
    accent = np.array(list(speaker.accent[3 * idx : 3 * idx + 3]) + [1.0])
    return np.array(VOWELS[vowel]) * accent * speaker.vtl_scale


def _paint_consonant(
    p: _Painter, speaker: Speaker, rng: np.random.Generator, kind: str, start: float, scale: float, coda: bool
) -> float:
    """Paint one consonant starting at ``start``; returns its duration in seconds."""
    bw = _VOWEL_BANDWIDTHS * speaker.bandwidth_scale
    vtl = speaker.vtl_scale
    fi = FRICATIVE_NAMES.index
    if kind in _STOPS:
        place = _STOPS[kind]
        voiced = kind in "bdg"
        closure = rng.uniform(0.035, 0.06 if voiced else 0.085) * scale
        burst = rng.uniform(0.006, 0.014)
        asp = 0.0 if voiced else rng.uniform(0.02, 0.055) * scale
        if coda:
            asp *= 0.5
        dur = closure + burst + asp
        locus = np.array(_LOCI[place]) * vtl
        p.anchor(start + closure, locus, bw * 1.2)
        if voiced:  # voice bar: weak voicing during the closure
            p.voicing += 0.12 * p.ramp(start, start + closure)
            p.dips.append((start + closure / 2, closure))
        p.frication[fi(f"burst_{place}")] += rng.uniform(0.5, 1.0) * p.ramp(
            start + closure, start + closure + burst, 0.004
        )
        if asp > 0:
            p.aspiration += rng.uniform(0.35, 0.7) * p.ramp(start + closure + burst, start + dur, 0.01)
        return dur
    if kind in ("s", "sh", "f", "z", "v"):
        voiced = kind in ("z", "v")
        noise = {"z": "s", "v": "f"}.get(kind, kind)
        dur = rng.uniform(0.06, 0.13 if not voiced else 0.09) * scale
        place = {"s": "alveolar", "z": "alveolar", "sh": "postalveolar", "f": "labial", "v": "labial"}[kind]
        p.anchor(start + dur / 2, np.array(_LOCI[place]) * vtl, bw * 1.3)
        level = rng.uniform(0.18, 0.32) * (0.6 if voiced else 1.0)
        p.frication[fi(noise)] += level * p.ramp(start, start + dur, 0.02)
        if voiced:
            p.voicing += 0.35 * p.ramp(start, start + dur)
            p.dips.append((start + dur / 2, dur))
        return dur
    if kind == "h":
        dur = rng.uniform(0.04, 0.08) * scale
        p.aspiration += rng.uniform(0.35, 0.6) * p.ramp(start, start + dur, 0.02)
        return dur
    if kind in ("m", "n"):
        dur = rng.uniform(0.045, 0.085) * scale
        p.anchor(start + dur / 2, np.array(_LOCI[f"nasal_{kind}"]) * vtl, bw * np.array([1.8, 2.5, 2.0, 1.6]))
        p.voicing += 0.32 * p.ramp(start, start + dur)
        return dur
    # approximants l r w j
    dur = rng.uniform(0.04, 0.075) * scale
    p.anchor(start + dur / 2, np.array(_LOCI[kind]) * vtl, bw * 1.2)
    p.voicing += 0.6 * p.ramp(start, start + dur)
    return dur


def plan_utterance(speaker: Speaker, rng: np.random.Generator, n_samples: int, sample_rate: int) -> UtterancePlan:
    """Draw the control tracks of one utterance of ``speaker`` that lasts exactly ``n_samples`` samples.

    Leading silence, syllables (optional onset, vowel with optional diphthong glide, optional coda), short
    phrase pauses, and trailing silence fill the duration; F0 gets declination, accents and a final contour.
    """
    hop = frame_hop(sample_rate)
    n_frames = n_samples // hop + 2
    total = n_samples / sample_rate
    p = _Painter(n_frames, hop, sample_rate)
    scale = 4.8 / speaker.rate  # duration scale relative to a ~4.8 syllables/s talker
    lead = rng.uniform(0.03, 0.22) * min(1.0, total / 1.5)
    tail_min = 0.04
    t = lead
    syllables: list[tuple[int, int]] = []
    bw_vowel = _VOWEL_BANDWIDTHS * speaker.bandwidth_scale
    while True:
        stressed = rng.random() < 0.45
        onset = _choose(rng, _ONSETS)
        coda = _choose(rng, _CODAS)
        vowel_dur = rng.uniform(0.07, 0.15) * scale * (1.35 if stressed else 1.0)
        est = vowel_dur + (0.1 * scale if onset != "none" else 0.0) + (0.1 * scale if coda != "none" else 0.0)
        if t + est > total - tail_min:
            if syllables:
                break
            # nothing fits yet: one short vowel that does
            onset, coda = "none", "none"
            vowel_dur = max(0.03, total - tail_min - t)
        start = t
        if onset != "none":
            t += _paint_consonant(p, speaker, rng, onset, t, scale, coda=False)
        vowel = VOWEL_NAMES[int(rng.integers(len(VOWEL_NAMES)))]
        target = _vowel_formants(speaker, vowel)
        p.anchor(t + 0.3 * vowel_dur, target, bw_vowel)
        if rng.random() < 0.3:  # diphthong glide towards a second vowel
            target = 0.5 * target + 0.5 * _vowel_formants(speaker, VOWEL_NAMES[int(rng.integers(len(VOWEL_NAMES)))])
        p.anchor(t + 0.75 * vowel_dur, target, bw_vowel)
        stress_amp = 1.0 if stressed else rng.uniform(0.45, 0.75)
        shape = p.ramp(t, t + vowel_dur, 0.02) * (0.7 + 0.3 * np.sin(np.pi * np.clip((p.times - t) / vowel_dur, 0, 1)))
        p.voicing += stress_amp * shape
        if stressed:
            p.accents.append((t + 0.5 * vowel_dur, 0.45 * vowel_dur + 0.03, rng.uniform(0.5, 1.0)))
        t += vowel_dur
        if coda != "none":
            t += _paint_consonant(p, speaker, rng, coda, t, scale, coda=True)
        syllables.append((int(start * sample_rate), int(min(t, total) * sample_rate)))
        if t >= total - tail_min:
            break
        if rng.random() < 0.12:
            t += rng.uniform(0.06, 0.22)  # phrase pause

    # formant tracks: interpolate anchors, then smooth (coarticulation)
    anchor_t = np.array(p.anchor_t)
    anchor_f = np.array(p.anchor_f).T
    anchor_b = np.array(p.anchor_b).T
    order = np.argsort(anchor_t, kind="stable")
    formants = np.stack([np.interp(p.times, anchor_t[order], anchor_f[i, order]) for i in range(4)])
    bandwidths = np.stack([np.interp(p.times, anchor_t[order], anchor_b[i, order]) for i in range(4)])
    smooth = max(1, round(0.028 * sample_rate / hop))
    formants = smooth_track(formants, smooth)
    bandwidths = smooth_track(bandwidths, smooth)
    # fixed higher poles F5, F6 (Klatt's higher-pole correction: the tract has more resonances than F1-F4)
    high = np.array([4400.0, 5600.0]) * speaker.vtl_scale
    formants = np.concatenate([formants, np.repeat(high[:, None], n_frames, axis=1)])
    bandwidths = np.concatenate([bandwidths, np.repeat(np.array([[300.0], [450.0]]), n_frames, axis=1)])
    nyquist = 0.5 * sample_rate
    formants = np.minimum(formants, nyquist * np.array([0.6, 0.8, 0.88, 0.91, 0.93, 0.95])[:, None])

    # F0 in semitones around the speaker's mean
    semis = np.full(n_frames, rng.normal(0.0, 1.0))
    semis -= speaker.declination * np.clip(p.times - lead, 0.0, None)
    for centre, width, height in p.accents:
        semis += height * speaker.f0_range * np.exp(-0.5 * ((p.times - centre) / width) ** 2)
    for centre, width in p.dips:
        semis -= 1.0 * np.exp(-0.5 * ((p.times - centre) / (0.5 * width + 0.01)) ** 2)
    end_t = syllables[-1][1] / sample_rate
    final = np.clip((p.times - (end_t - 0.3)) / 0.3, 0.0, 1.0)
    semis += (rng.uniform(2.0, 5.0) if rng.random() < 0.25 else -rng.uniform(1.0, 3.0)) * final
    drift = smooth_track(rng.normal(0.0, 1.0, n_frames), max(3, round(0.15 * sample_rate / hop)))
    semis += 2.0 * drift
    f0 = np.clip(speaker.f0_mean * 2.0 ** (semis / 12.0), 50.0, 0.45 * sample_rate / 8)

    amp_decl = 1.0 - 0.25 * np.clip((p.times - lead) / max(total, 1e-3), 0.0, 1.0)  # amplitude declination
    voicing = smooth_track(np.clip(p.voicing, 0.0, 1.2), 3) * amp_decl
    return UtterancePlan(
        sample_rate=sample_rate,
        n_samples=n_samples,
        hop=hop,
        f0=f0,
        voicing=voicing,
        aspiration=smooth_track(p.aspiration, 3) * amp_decl,
        frication=smooth_track(p.frication, 3) * amp_decl,
        formants=formants,
        bandwidths=bandwidths,
        syllables=syllables,
    )


@lru_cache(maxsize=32)
def _sample_positions(hop: int, n_samples: int) -> np.ndarray:
    positions = np.arange(n_samples) / hop
    positions.setflags(write=False)
    return positions


def frames_to_samples(track: np.ndarray, hop: int, n_samples: int) -> np.ndarray:
    """Linear interpolation of a frame track (frame ``t`` at sample ``t * hop``) to every sample."""
    positions = _sample_positions(hop, n_samples)
    frames = np.arange(track.shape[-1])
    if track.ndim == 1:
        return np.interp(positions, frames, track)
    return np.stack([np.interp(positions, frames, row) for row in track.reshape(-1, track.shape[-1])]).reshape(
        *track.shape[:-1], n_samples
    )


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


@dataclass(frozen=True, eq=False)
class Channel:
    """A recording set-up: room impulse response and microphone/EQ filter.

    Args:
        room: room impulse response (direct path first).
        eq: second-order sections of the microphone high-pass and EQ.
    """

    room: np.ndarray
    eq: np.ndarray


def _peaking(freq: float, gain_db: float, q: float, sample_rate: int) -> np.ndarray:
    """RBJ audio-EQ-cookbook peaking biquad as one second-order section."""
    amp = 10.0 ** (gain_db / 40.0)
    w0 = 2.0 * np.pi * freq / sample_rate
    alpha = np.sin(w0) / (2.0 * q)
    b = np.array([1 + alpha * amp, -2 * np.cos(w0), 1 - alpha * amp])
    a = np.array([1 + alpha / amp, -2 * np.cos(w0), 1 - alpha / amp])
    return np.concatenate([b / a[0], a / a[0]])


@lru_cache(maxsize=256)
def speaker_channel(speaker: Speaker, sample_rate: int) -> Channel:
    """The speaker's recording channel, a deterministic function of ``speaker.channel_seed``."""
    rng = np.random.default_rng(speaker.channel_seed)
    rt60 = rng.uniform(0.08, 0.25)
    length = int(min(rt60, 0.35) * sample_rate)
    t = np.arange(length) / sample_rate
    room = np.zeros(length)
    room[0] = 1.0
    for _ in range(int(rng.integers(3, 7))):  # early reflections
        room[int(rng.uniform(0.002, 0.018) * sample_rate)] += rng.uniform(-0.45, 0.45)
    tail = rng.standard_normal(length) * np.exp(-6.9 * t / rt60)
    tail = signal.lfilter([1.0 - 0.5], [1.0, -0.5], tail)  # air absorption: the tail loses highs
    tail[: int(0.004 * sample_rate)] = 0.0
    drr_db = rng.uniform(12.0, 22.0)
    tail *= np.sqrt(np.sum(room**2) / max(np.sum(tail**2), 1e-12)) * 10.0 ** (-drr_db / 20.0)
    room += tail
    eq = [signal.butter(2, rng.uniform(60.0, 120.0), btype="highpass", fs=sample_rate, output="sos")[0]]
    for _ in range(2):
        eq.append(
            _peaking(rng.uniform(250.0, 0.3 * sample_rate), rng.uniform(-2.5, 2.5), rng.uniform(0.7, 2.0), sample_rate)
        )
    eq.append(_peaking(0.38 * sample_rate, rng.uniform(-3.0, 1.5), 0.6, sample_rate))  # presence / high roll-off
    channel = Channel(room=room.astype(np.float64), eq=np.array(eq))
    channel.room.setflags(write=False)
    channel.eq.setflags(write=False)
    return channel


def active_level(x: np.ndarray, sample_rate: int, floor_db: float = 35.0) -> float:
    """RMS over the 20 ms frames whose power is within ``floor_db`` of the loudest frame (an active speech level)."""
    frame = max(1, int(0.02 * sample_rate))
    n = (x.shape[-1] // frame) * frame
    if n == 0:
        return float(np.sqrt(np.mean(x**2)))
    power = np.mean(x[:n].reshape(-1, frame) ** 2, axis=1)
    active = power[power >= power.max() * 10.0 ** (-floor_db / 10.0)]
    return float(np.sqrt(np.mean(active))) if active.size else 0.0


def apply_channel(
    x: np.ndarray, speaker: Speaker, sample_rate: int, rng: np.random.Generator, snr_db: float | None = None
) -> np.ndarray:
    """Room, microphone/EQ and a background noise floor at ``snr_db`` (drawn in 30–50 dB when None)."""
    channel = speaker_channel(speaker, sample_rate)
    n = x.shape[-1]
    y = signal.fftconvolve(x, channel.room)[:n]
    y = signal.sosfilt(channel.eq.copy(), y)
    snr_db = rng.uniform(30.0, 50.0) if snr_db is None else snr_db
    noise = signal.lfilter([1.0], [1.0, -0.9], rng.standard_normal(n))
    noise *= active_level(y, sample_rate) * 10.0 ** (-snr_db / 20.0) / max(float(np.sqrt(np.mean(noise**2))), 1e-12)
    return y + noise


def synthesize(plan: UtterancePlan, speaker: Speaker, rng: np.random.Generator, *, channel: bool = True) -> np.ndarray:
    """Bona fide rendering of ``plan``: glottal source → formant cascade (+ fricatives) → recording channel."""
    dry = render_tract(plan, glottal_source(plan, speaker, rng), rng)
    return apply_channel(dry, speaker, plan.sample_rate, rng) if channel else dry
