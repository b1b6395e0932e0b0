"""Waveform augmentations for the audio data pipeline, and the pipeline that chains them.

Each augmentation is a small class registered as an ``augmentation`` and called on one
utterance at a time, ``aug(wave, rng) -> wave``: ``wave`` a 1-D float numpy array, ``rng``
a ``numpy.random.Generator``. Every random choice comes from ``rng`` — never from numpy's
global state or torch's — so the data layer makes augmentation reproducible and exactly
resumable by passing ``np.random.default_rng([seed, epoch, index])``. Outputs are float32,
finite (a silent input stays finite), and as long as the input except for
``random_crop``, whose purpose is to change the length.

Registered here (each in the module named):

* ``rawboost`` — RawBoost (Tak et al., ICASSP 2022), algorithms in :mod:`.rawboost`
  (:mod:`.augment_basic`);
* ``add_noise`` — white / pink / brown noise, or noise from a folder of audio files, at a
  random SNR (:mod:`.augment_noise`);
* ``gain`` — random gain in dB, optionally limited so the peak stays within 1 (:mod:`.augment_basic`);
* ``time_shift`` — circular or zero-filled shift (:mod:`.augment_basic`);
* ``random_crop`` — crop or repeat/zero-pad to a fixed duration at a random offset (:mod:`.augment_basic`);
* ``one_of`` — apply one of several augmentations, picked at random (:mod:`.augment_pipeline`).

A config lists steps, each ``{type, args, p}`` (``p``: probability the step is applied,
default 1); :func:`build_augmentations` turns the list into a :class:`Pipeline`
(:mod:`.augment_pipeline`). The contract and the shared checks are in :mod:`.augment_base`;
the channel, codec and room augmentations in :mod:`.channel_augment`, :mod:`.codecs` and
:mod:`.rooms`. This module re-exports the names, and importing it registers the augmentations above.
"""

from __future__ import annotations

from .augment_base import Augmentation, as_waveform
from .augment_basic import Gain, RandomCrop, RawBoost, TimeShift
from .augment_noise import AddNoise, colored_noise
from .augment_pipeline import OneOf, Pipeline, Step, build_augmentations

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
