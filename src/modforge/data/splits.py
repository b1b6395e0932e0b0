"""Stratified splitting with scikit-learn."""

from __future__ import annotations

from .base import ArrayDataset

__all__ = ["sklearn_seed", "stratified_three_way"]


def stratified_three_way(
    data: ArrayDataset, val_fraction: float, test_fraction: float, seed: int
) -> tuple[ArrayDataset, ArrayDataset | None, ArrayDataset | None]:
    """Train/val/test subsets with the class proportions of ``data`` (sklearn's splitter)."""
    from sklearn.model_selection import train_test_split

    for name, value in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if not 0.0 <= value < 1.0:
            raise ValueError(f"{name} must be in [0, 1), got {value}")
    if val_fraction + test_fraction >= 1.0:
        raise ValueError(f"val_fraction + test_fraction must leave training data, got {val_fraction + test_fraction}")
    positions = list(range(len(data)))
    labels = data.labels.numpy()
    test = None
    if test_fraction > 0:
        positions, test_pos = train_test_split(
            positions, test_size=test_fraction, stratify=labels, random_state=sklearn_seed(seed)
        )
        test = data.subset(sorted(test_pos))
    val = None
    if val_fraction > 0:
        rest_labels = labels[positions]
        positions, val_pos = train_test_split(
            positions, test_size=val_fraction / (1.0 - test_fraction), stratify=rest_labels, random_state=sklearn_seed(seed)
        )
        val = data.subset(sorted(val_pos))
    return data.subset(sorted(positions)), val, test


def sklearn_seed(seed: int) -> int:
    """A modforge seed (any int, negative ones included) as scikit-learn's ``random_state``,
    which must lie in [0, 2**32 - 1]."""
    return int(seed) % 2**32
