"""Planning one synthetic utterance (:mod:`.speech_synth`): the frame-level control tracks — F0, voicing,
aspiration, frication, formants and bandwidths — drawn from a speaker and a generator, and the frame-grid
helpers (hop, smoothing, interpolation to samples) that the renderer and the spoofing attacks share.

Syllables (optional onset, vowel with optional diphthong glide, optional coda) are painted on the frame grid
as phone targets and amplitude ramps; formant anchors are interpolated and smoothed (coarticulation), and F0
gets declination, accents, microprosodic dips and a final contour.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .speech_phones import (
    CODAS,
    CONSONANT_LOCI,
    FRICATIVE_NAMES,
    FRICATIVES,
    ONSETS,
    STOP_PLACES,
    VOWEL_BANDWIDTHS,
    VOWEL_NAMES,
    VOWELS,
)
from .speech_speaker import Speaker

__all__ = ["UtterancePlan", "decimate_track", "frame_hop", "frames_to_samples", "plan_utterance", "smooth_track"]


def frame_hop(sample_rate: int) -> int:
    """Samples between parameter frames (4 ms)."""
    return max(8, round(sample_rate * 0.004))


def decimate_track(track: np.ndarray, step: int, n_frames: int) -> np.ndarray:
    """Every ``step``-th frame of a track, padded with its last frame to ``n_frames`` frames."""
    out = track[..., ::step][..., :n_frames]
    if out.shape[-1] < n_frames:
        pad = [(0, 0)] * (out.ndim - 1) + [(0, n_frames - out.shape[-1])]
        out = np.pad(out, pad, mode="edge")
    return out


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
    bw = VOWEL_BANDWIDTHS * speaker.bandwidth_scale
    vtl = speaker.vtl_scale
    fi = FRICATIVE_NAMES.index
    if kind in STOP_PLACES:
        place = STOP_PLACES[kind]
        voiced = kind in "bdg"
        closure = rng.uniform(0.035, 0.06 if voiced else 0.085) * scale
        burst = rng.uniform(0.006, 0.014)
        asp = 0.0 if voiced else rng.uniform(0.02, 0.055) * scale
        if coda:
            asp *= 0.5
        dur = closure + burst + asp
        locus = np.array(CONSONANT_LOCI[place]) * vtl
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
        p.anchor(start + dur / 2, np.array(CONSONANT_LOCI[place]) * vtl, bw * 1.3)
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
        p.anchor(start + dur / 2, np.array(CONSONANT_LOCI[f"nasal_{kind}"]) * vtl, bw * np.array([1.8, 2.5, 2.0, 1.6]))
        p.voicing += 0.32 * p.ramp(start, start + dur)
        return dur
    # approximants l r w j
    dur = rng.uniform(0.04, 0.075) * scale
    p.anchor(start + dur / 2, np.array(CONSONANT_LOCI[kind]) * vtl, bw * 1.2)
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
    bw_vowel = VOWEL_BANDWIDTHS * speaker.bandwidth_scale
    while True:
        stressed = rng.random() < 0.45
        onset = _choose(rng, ONSETS)
        coda = _choose(rng, CODAS)
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
