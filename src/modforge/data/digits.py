"""``digits`` — scikit-learn's bundled handwritten digits (1,797 8×8 images, 10 classes),
as 1×8×8 images or 64-feature vectors, split train/val/test with stratification."""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ..core.constraints import PositiveInt
from ..core.layouts import Layout
from ..core.registries import register_dataset
from .base import ArrayDataset, DataSplits
from .splits import stratified_three_way


@register_dataset("digits")
def digits(
    seed: int = 0,
    as_image: bool = True,
    val_fraction: float = 0.15,
    test_fraction: float = 0.15,
    size: PositiveInt = 8,
) -> DataSplits:
    """Handwritten digits 0-9 from scikit-learn (real data shipped with the package).

    Args:
        seed: seed of the stratified split (wired from the config's ``seed``).
        as_image: 1×8×8 images (for CNNs) instead of 64-feature vectors.
        val_fraction: share of the samples held out for validation.
        test_fraction: share held out for the test split.
        size: the images' side in pixels: 8 (the scans' own), or larger by bilinear
            interpolation (32: CIFAR-sized input for networks and measurements made for it).
    """
    pixels, targets = digits_arrays()
    inputs = torch.tensor(pixels, dtype=torch.float32) / 16.0  # pixel values are 0..16
    labels = torch.tensor(targets, dtype=torch.long)
    if size != 8 and not as_image:
        raise ValueError(f"size {size} needs as_image: true (the 64-feature vectors are the 8×8 scans)")
    if size < 8:
        raise ValueError(f"size must be at least the scans' 8 pixels, got {size}")
    if as_image:
        inputs = inputs.reshape(-1, 1, 8, 8)
        if size != 8:
            inputs = F.interpolate(inputs, size=(size, size), mode="bilinear", align_corners=False)
    everything = ArrayDataset(inputs, labels)
    train, val, test = stratified_three_way(everything, val_fraction, test_fraction, seed)
    shape = tuple(inputs.shape[1:])
    return DataSplits(
        train,
        val,
        test,
        num_classes=10,
        in_dim=1 if as_image else 64,
        layout=Layout.IMAGE if as_image else Layout.VECTOR,
        input_shape=shape,
        class_names=[str(i) for i in range(10)],
        normalisation={"divide_by": 16.0, "raw": "pixel intensities 0..16 (0: background)"},
        image={"height": size, "width": size, "channels": 1, "ink": "dark", "scale": 1.0},
    )


def digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """The 1,797 scans as (pixels 1797×64 in 0..16, labels 1797): scikit-learn's bundled
    ``datasets/data/digits.csv.gz`` (what ``sklearn.datasets.load_digits`` reads), read from
    the installed package's folder without importing it — the import costs 1.5-2 CPU-seconds
    (SciPy's statistics) of every run's start, the file 10 ms. Where the file is not where
    scikit-learn 1.x keeps it, ``load_digits`` reads it."""
    spec = importlib.util.find_spec("sklearn")  # finds the package without running its __init__
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("the digits dataset is scikit-learn's: pip install scikit-learn")
    bundled = Path(spec.origin).parent / "datasets" / "data" / "digits.csv.gz"
    if not bundled.is_file():
        from sklearn.datasets import load_digits

        data = load_digits()
        return data.data, data.target
    with gzip.open(bundled, "rt", encoding="utf-8") as rows:
        table = np.loadtxt(rows, delimiter=",")
    return table[:, :-1], table[:, -1].astype(int)


digits.num_classes = 10  # stated without loading, so validation can check a configured num_classes
