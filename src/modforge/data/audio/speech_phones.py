"""The phone inventory of the synthetic voice (:mod:`.speech_synth`): vowel formant targets, consonant loci,
the parallel-branch fricative noise bands, and how often each onset and coda occurs.

Why a file of its own: these tables are the model's data, read by the speaker draw (per-vowel accents), the
utterance planner (targets and loci) and the renderer (fricative filters); keeping them apart keeps those short.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "CODAS",
    "CONSONANT_LOCI",
    "FRICATIVES",
    "FRICATIVE_NAMES",
    "ONSETS",
    "STOP_PLACES",
    "VOWELS",
    "VOWEL_BANDWIDTHS",
    "VOWEL_NAMES",
]

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
VOWEL_BANDWIDTHS = np.array([70.0, 90.0, 140.0, 220.0])

# Consonant formant loci / targets (adult male), bandwidths are widened for nasals.
CONSONANT_LOCI: dict[str, tuple[float, float, float, float]] = {
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

STOP_PLACES = {"p": "labial", "t": "alveolar", "k": "velar", "b": "labial", "d": "alveolar", "g": "velar"}
ONSETS: tuple[tuple[str, float], ...] = (
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
CODAS: tuple[tuple[str, float], ...] = (
    ("none", 0.55),
    ("t", 0.08),
    ("k", 0.05),
    ("s", 0.09),
    ("n", 0.09),
    ("m", 0.05),
    ("l", 0.05),
    ("r", 0.04),
)
