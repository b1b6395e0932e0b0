"""A synthetic talker (:mod:`.speech_synth`): the voice-source, prosody, vocal-tract and channel settings
shared by all of one speaker's utterances, and the random draw of one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .speech_phones import VOWELS

__all__ = ["Speaker", "make_speaker"]


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
