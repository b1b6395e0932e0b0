"""The first few 32-bit outputs of torch's CPU generator seeded with each of many seeds, computed
for a whole batch of seeds at once.

Why: batched augmentation draws what torchvision's v2 transforms would draw one picture at a time
from torch's CPU generator seeded per sample (:mod:`.batched`). Seeding a ``torch.Generator`` and
drawing from it sample after sample costs ~7 µs a picture on these cores — 7 ms for a batch of
1,024, most of a training step on an accelerator (measured on an H200: the shipped airbench
config's data-on-the-GPU mode ran 2.6× slower than the same steps on plain tensors). A picture's
crop and flip read only the generator's first outputs after seeding, and those follow from a
few hundred words of its seeding recurrence, which numpy runs for every sample of the batch at
once: ~1.4 ms for 1,024 seeds, the same numbers.

torch's CPU generator is MT19937 (``ATen/core/MT19937RNGEngine.h``): seeding with ``s`` sets
word 0 to ``s mod 2**32`` and word ``j`` to ``1812433253 * (w ^ (w >> 30)) + j`` of word
``j - 1`` (mod 2**32); the first draw regenerates the state, and output ``k < 227`` is word
``k + 397`` xor the twist of words ``k`` and ``k + 1`` (all three still as seeded), tempered.
:func:`agrees_with_torch` checks this against the generator itself; callers use these numbers
only where it holds.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import torch

__all__ = ["agrees_with_torch", "first_outputs", "first_outputs_on"]

_SHIFT = 397  # MT19937's middle word
_WORDS = 624
_UPPER, _LOWER, _TWIST = np.uint32(0x80000000), np.uint32(0x7FFFFFFF), np.uint32(0x9908B0DF)


def first_outputs(seeds: Sequence[int] | np.ndarray, count: int) -> np.ndarray:
    """``[len(seeds), count]`` uint32: the first ``count`` 32-bit outputs of torch's CPU generator
    after ``manual_seed(seed)``, for each seed (``count`` at most 227)."""
    if not 0 <= count <= _WORDS - _SHIFT:
        raise ValueError(f"count must be in 0..{_WORDS - _SHIFT}, got {count}")
    values = np.asarray(seeds, dtype=np.uint64)
    if count == 0:
        return np.zeros((len(values), 0), dtype=np.uint32)
    words = np.empty((_SHIFT + count, len(values)), dtype=np.uint32)
    words[0] = (values & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    scratch = np.empty(len(values), dtype=np.uint32)
    factor = np.uint32(1812433253)
    for j in range(1, len(words)):  # the seeding recurrence, for every seed at once (wrapping uint32)
        np.right_shift(words[j - 1], 30, out=scratch)
        np.bitwise_xor(words[j - 1], scratch, out=scratch)
        np.multiply(scratch, factor, out=scratch)
        np.add(scratch, np.uint32(j), out=words[j])
    k = np.arange(count)
    mixed = (words[k] & _UPPER) | (words[k + 1] & _LOWER)
    out = words[k + _SHIFT] ^ (mixed >> np.uint32(1)) ^ np.where(mixed & np.uint32(1), _TWIST, np.uint32(0))
    out ^= out >> np.uint32(11)  # tempering
    out ^= (out << np.uint32(7)) & np.uint32(0x9D2C5680)
    out ^= (out << np.uint32(15)) & np.uint32(0xEFC60000)
    out ^= out >> np.uint32(18)
    return np.ascontiguousarray(out.T)


def first_outputs_on(seeds: torch.Tensor, count: int) -> torch.Tensor:
    """:func:`first_outputs` of int64 ``seeds`` (each in ``0 .. 2**63 - 1``), computed where they
    live, as ``[len(seeds), count]`` int64: on an accelerator any number of seeds costs about two
    thousand small launches (the recurrence's ~400 steps), ~15 ms of host time — a split on the
    device makes eight epochs' draws in one call — where numpy on the host takes ~1.4 ms for every
    batch of 1,024."""
    if not 0 <= count <= _WORDS - _SHIFT:
        raise ValueError(f"count must be in 0..{_WORDS - _SHIFT}, got {count}")
    mask = 0xFFFFFFFF
    word = seeds & mask
    head, middle = [word], []  # words 0..count and SHIFT..SHIFT+count-1: all the first outputs read
    for j in range(1, _SHIFT + count):
        word = ((word ^ (word >> 30)) * 1812433253 + j) & mask  # below 2**63: exact in int64
        if j <= count:
            head.append(word)
        if j >= _SHIFT:
            middle.append(word)
    outputs = []
    for k in range(count):
        mixed = (head[k] & int(_UPPER)) | (head[k + 1] & int(_LOWER))
        out = middle[k] ^ (mixed >> 1) ^ ((mixed & 1) * int(_TWIST))
        out = out ^ (out >> 11)
        out = out ^ ((out << 7) & 0x9D2C5680)
        out = out ^ ((out << 15) & 0xEFC60000)
        outputs.append(out ^ (out >> 18))
    return torch.stack(outputs, dim=1) if outputs else seeds.new_zeros((len(seeds), 0))


@functools.cache
def agrees_with_torch() -> bool:
    """Whether :func:`first_outputs` gives what this torch's CPU generator gives, read as
    :mod:`.batched` reads it (``random_(0, m)`` is the output modulo ``m`` for ``m < 2**28``;
    checked once a process, on seeds across the 63-bit range the per-sample seeds take)."""
    seeds = [0, 1, 12345, 2**32 - 1, 2**32 + 7, 2**62 + 12345, 2**63 - 25]
    outputs = first_outputs(seeds, 5).astype(np.int64)
    generator = torch.Generator()
    for modulus in (2**24, 2**28 - 57, 9 * 5 * 7):
        for seed, row in zip(seeds, outputs, strict=True):
            generator.manual_seed(seed)
            drawn = torch.empty(5, dtype=torch.int64).random_(0, modulus, generator=generator).tolist()
            if drawn != (row % modulus).tolist():
                return False
    return True
