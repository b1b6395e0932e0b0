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

The model lives in one file per job, all re-exported here (the names spoofing code uses as ``ss.<name>``):
:mod:`.speech_phones` (the phone tables), :mod:`.speech_speaker` (a talker), :mod:`.speech_plan` (an
utterance's control tracks), :mod:`.speech_render` (source and tract) and :mod:`.speech_channel` (the
recording channel); :func:`synthesize` chains them.
"""

from __future__ import annotations

import numpy as np

from .speech_channel import Channel, active_level, apply_channel, speaker_channel
from .speech_phones import FRICATIVE_NAMES, FRICATIVES, VOWEL_NAMES, VOWELS
from .speech_plan import UtterancePlan, decimate_track, frame_hop, frames_to_samples, plan_utterance, smooth_track
from .speech_render import (
    filter_fft_size,
    filter_hop,
    frication_noise,
    fricative_filters,
    glottal_source,
    ola_frames,
    ola_synthesis,
    render_tract,
    resonator_cascade_response,
    rosenberg_flow,
    time_varying_filter,
)
from .speech_speaker import Speaker, make_speaker

__all__ = [
    "FRICATIVES",
    "FRICATIVE_NAMES",
    "VOWELS",
    "VOWEL_NAMES",
    "Channel",
    "Speaker",
    "UtterancePlan",
    "active_level",
    "apply_channel",
    "decimate_track",
    "filter_fft_size",
    "filter_hop",
    "frame_hop",
    "frames_to_samples",
    "frication_noise",
    "fricative_filters",
    "glottal_source",
    "make_speaker",
    "ola_frames",
    "ola_synthesis",
    "plan_utterance",
    "render_tract",
    "resonator_cascade_response",
    "rosenberg_flow",
    "smooth_track",
    "speaker_channel",
    "synthesize",
    "time_varying_filter",
]


def synthesize(plan: UtterancePlan, speaker: Speaker, rng: np.random.Generator, *, channel: bool = True) -> np.ndarray:
    """Bona fide rendering of ``plan``: glottal source → formant cascade (+ fricatives) → recording channel."""
    dry = render_tract(plan, glottal_source(plan, speaker, rng), rng)
    return apply_channel(dry, speaker, plan.sample_rate, rng) if channel else dry
