"""Seeded train/held-out splits, stratified by class where they can be.

The draws are scikit-learn's: :func:`held_out_split` returns, index for index and in the same
order, what ``sklearn.model_selection.train_test_split(range(n), test_size=fraction,
stratify=labels or None, random_state=seed)`` returns (its ``StratifiedShuffleSplit`` or
``ShuffleSplit``, both drawing from ``numpy.random.RandomState(seed)``), so a run split before
this module existed splits the same today — ``tests/test_splits.py`` holds the two equal over
thousands of random cases. It is written here rather than imported because importing
scikit-learn's splitter costs 1.5-2 CPU-seconds (it loads SciPy's statistics) at the start of
every run that splits digits, a synthetic problem or a picture folder, which is most of a small
run's start-up; the draw itself is a few array operations.
"""

from __future__ import annotations

import math

import numpy as np

from .base import ArrayDataset

__all__ = ["held_out_count", "held_out_split", "sklearn_seed", "stratified_three_way"]


def stratified_three_way(
    data: ArrayDataset, val_fraction: float, test_fraction: float, seed: int
) -> tuple[ArrayDataset, ArrayDataset | None, ArrayDataset | None]:
    """Train/val/test subsets with the class proportions of ``data``: the test split carved
    first, then the validation split from what is left (both seeded by ``seed``)."""
    for name, value in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if not 0.0 <= value < 1.0:
            raise ValueError(f"{name} must be in [0, 1), got {value}")
    if val_fraction + test_fraction >= 1.0:
        raise ValueError(f"val_fraction + test_fraction must leave training data, got {val_fraction + test_fraction}")
    positions = np.arange(len(data))
    labels = data.labels.numpy()
    test = None
    if test_fraction > 0:
        kept, held = held_out_split(labels, test_fraction, seed, stratify=True)
        positions, test = positions[kept], data.subset(sorted(positions[held].tolist()))
    val = None
    if val_fraction > 0:
        kept, held = held_out_split(labels[positions], val_fraction / (1.0 - test_fraction), seed, stratify=True)
        positions, val = positions[kept], data.subset(sorted(positions[held].tolist()))
    return data.subset(sorted(positions.tolist())), val, test


def held_out_count(fraction: float, total: int) -> int:
    """How many of ``total`` samples a held-out ``fraction`` takes: rounded up, as scikit-learn does."""
    return math.ceil(fraction * total)


def held_out_split(labels: np.ndarray, fraction: float, seed: int, *, stratify: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(kept, held)``: positions into ``labels``, ``fraction`` of them (rounded up) held out,
    each side in its drawn order. ``stratify`` keeps every class's share on both sides, which
    needs each class twice or more and room for every class on each side (else ``ValueError``
    saying which); without it the draw is one seeded permutation."""
    total = len(labels)
    held = held_out_count(fraction, total)
    kept = total - held
    if not 0.0 < fraction < 1.0 or kept <= 0 or held <= 0:
        raise ValueError(f"a held-out fraction of {fraction} of {total} samples leaves an empty side")
    rng = np.random.RandomState(sklearn_seed(seed))
    if not stratify:
        order = rng.permutation(total)
        return order[held : held + kept], order[:held]
    classes, codes, counts = np.unique(np.asarray(labels), return_inverse=True, return_counts=True)
    if counts.min() < 2:
        raise ValueError(f"a stratified split needs every class twice or more; classes {classes[counts < 2].tolist()} "
                         "have one sample")  # fmt: skip
    for side, size in (("kept", kept), ("held-out", held)):
        if size < len(classes):
            raise ValueError(f"the {side} side of the split has {size} samples, fewer than the {len(classes)} classes")
    members = np.split(np.argsort(codes.reshape(-1), kind="stable"), np.cumsum(counts)[:-1])
    kept_per_class = _largest_remainders(counts, kept, rng)
    held_per_class = _largest_remainders(counts - kept_per_class, held, rng)
    kept_positions: list[int] = []
    held_positions: list[int] = []
    for cls, (k, h) in enumerate(zip(kept_per_class, held_per_class, strict=True)):
        shuffled = members[cls][rng.permutation(counts[cls])]
        kept_positions.extend(shuffled[:k])
        held_positions.extend(shuffled[k : k + h])
    return rng.permutation(kept_positions), rng.permutation(held_positions)


def _largest_remainders(counts: np.ndarray, draws: int, rng: np.random.RandomState) -> np.ndarray:
    """Per class, how many of ``draws`` to take so the shares follow ``counts``: each class its
    proportional share rounded down, then one more to the classes with the largest fractional
    remainders (equal remainders drawn at random from ``rng``) until ``draws`` are placed."""
    exact = counts / counts.sum() * draws
    taken = np.floor(exact)
    missing = int(draws - taken.sum())
    remainders = exact - taken
    for value in np.unique(remainders)[::-1]:
        if missing <= 0:
            break
        tied = np.flatnonzero(remainders == value)
        chosen = rng.choice(tied, size=min(len(tied), missing), replace=False)
        taken[chosen] += 1
        missing -= len(chosen)
    return taken.astype(int)


def sklearn_seed(seed: int) -> int:
    """A modforge seed (any int, negative ones included) as a NumPy / scikit-learn seed, which
    must lie in [0, 2**32 - 1]."""
    return int(seed) % 2**32
