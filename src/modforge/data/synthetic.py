"""``synthetic_classification`` — a Gaussian-cluster classification problem generated on
the spot (scikit-learn's ``make_classification``), for tests and quick experiments."""

from __future__ import annotations

import torch

from ..core.layouts import Layout
from ..core.registries import register_dataset
from .base import ArrayDataset, DataSplits
from .splits import sklearn_seed, stratified_three_way


@register_dataset("synthetic_classification")
def synthetic_classification(
    seed: int = 0,
    num_samples: int = 600,
    num_features: int = 16,
    num_classes: int = 3,
    informative: int = 8,
    class_sep: float = 1.0,
    val_fraction: float = 0.15,
    test_fraction: float = 0.15,
) -> DataSplits:
    """Clusters of points, ``informative`` dimensions carrying the class (the rest noise).

    Args:
        seed: generation and split seed (wired from the config's ``seed``).
        num_samples: total number of samples.
        num_features: features per sample.
        num_classes: number of classes.
        informative: features that depend on the class.
        class_sep: distance between class clusters (larger is easier).
        val_fraction: share held out for validation.
        test_fraction: share held out for testing.
    """
    from sklearn.datasets import make_classification

    if informative > num_features:
        raise ValueError(f"informative ({informative}) cannot exceed num_features ({num_features})")
    x, y = make_classification(
        n_samples=num_samples,
        n_features=num_features,
        n_informative=informative,
        n_redundant=0,
        n_classes=num_classes,
        n_clusters_per_class=1,
        class_sep=class_sep,
        random_state=sklearn_seed(seed),
    )
    data = ArrayDataset(torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.long))
    train, val, test = stratified_three_way(data, val_fraction, test_fraction, seed)
    return DataSplits(
        train,
        val,
        test,
        num_classes=num_classes,
        in_dim=num_features,
        layout=Layout.VECTOR,
        input_shape=(num_features,),
    )
