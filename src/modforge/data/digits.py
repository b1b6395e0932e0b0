"""``digits`` — scikit-learn's bundled handwritten digits (1,797 8×8 images, 10 classes),
as 1×8×8 images or 64-feature vectors, split train/val/test with stratification."""

from __future__ import annotations

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
    from sklearn.datasets import load_digits

    data = load_digits()
    inputs = torch.tensor(data.data, dtype=torch.float32) / 16.0  # pixel values are 0..16
    labels = torch.tensor(data.target, dtype=torch.long)
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


digits.num_classes = 10  # stated without loading, so validation can check a configured num_classes
