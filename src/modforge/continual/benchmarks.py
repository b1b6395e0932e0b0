"""Sequential benchmarks: a classification dataset turned into a sequence of tasks.

* **class-incremental** (``seq``; Mammoth's Seq-MNIST/Seq-CIFAR-10 shape): the classes are put
  in an order (the dataset's own, shuffled by the seed, Mammoth's seeded shuffle, or given) and
  cut into tasks of ``classes_per_task``; labels are renumbered by that order, so task ``t``
  holds classes ``t·k … t·k + k − 1`` — what task-IL masking and class-IL argmax need (both are
  reported after every task, so the same sequence serves the class-IL and task-IL settings).
* **domain-incremental** (``perm``, ``rot``; Perm-/Rot-MNIST): every task has all classes; each
  task applies its own fixed transform to the inputs — a random permutation of the pixels, or a
  rotation of the pictures by a random angle.

Any registered classification dataset is the source: its splits may be tensors
(:class:`~modforge.data.base.ArrayDataset`: relabelled and transformed once, when built) or
pictures (:class:`~modforge.data.images.dataset.ImageDataset`: the task's rotation or permutation
is a fixed transform applied as each sample is read, around the dataset's own pipeline; the
pictures are never copied per task). ``seq_digits``, ``perm_digits`` and ``rot_digits`` are
presets of the same functions over scikit-learn's digits; Mammoth's benchmarks (``seq_mnist``,
``seq_cifar10``, …) are presets in :mod:`modforge.continual.mammoth`, imported here so they register
with the rest.

Every task keeps its own train/val/test splits (the test sets are what the accuracy matrix is
made of). The :class:`ContinualSplits` is also an ordinary :class:`~modforge.data.base.DataSplits`
whose splits are all tasks joined — the JOINT upper bound trains on exactly that.

Where things live: the sequences and their splits in :mod:`modforge.continual.sequences`, the
per-task transforms and their seeded draws in :mod:`modforge.continual.task_transforms`; their
public names are re-exported here, where they were first defined.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal, Optional, Union

from ..core.constraints import PositiveInt
from ..core.errors import ConfigError
from ..core.layouts import Layout
from ..core.registries import DATASETS, register_dataset
from ..data.base import DataSplits
from ..data.digits import digits
from . import mammoth as _mammoth  # noqa: F401  (Mammoth's presets register with the rest)
from .sequences import (
    ClassOrder,
    ContinualSplits,
    TaskSplit,
    class_incremental,
    class_order_for,
    concat_splits,
    domain_incremental,
    flattened,
    flattened_sequence,
    flattened_split,
    split_kind,
)
from .task_transforms import (
    Draws,
    Flatten,
    PictureRotation,
    PixelPermutation,
    permutation,
    rotation,
    task_angles,
    task_permutations,
)

__all__ = [  # all re-exported: the sequences from .sequences, the task transforms from .task_transforms
    "ClassOrder", "ContinualSplits", "TaskSplit", "class_incremental", "class_order_for", "concat_splits",
    "domain_incremental", "flattened", "flattened_split",
    "Flatten", "PictureRotation", "PixelPermutation", "permutation", "rotation", "task_angles", "task_permutations",
]  # fmt: skip


# ----------------------------------------------------------------------------- over any registered dataset
DatasetSpec = Union[str, dict[str, Any]]


def build_source(dataset: DatasetSpec, seed: int, transforms: dict | None, *, path: str = "data.args.dataset") -> DataSplits:
    """The classification dataset a sequence is made of (``dataset`` is a spec as ``data:`` takes:
    a name or ``{type, args}``), built with the run's seed and ``data.transforms``."""
    spec = DATASETS.validate(dataset, path=path)
    target, signature = DATASETS.resolve(spec["type"], path=f"{path}.type")
    if transforms is not None and "transforms" not in signature:
        raise ConfigError(f"data.transforms are handed to the sequence's dataset, and {spec['type']!r} takes none "
                          "(they are for picture datasets: mnist, cifar10, …)", path="data.transforms")  # fmt: skip
    context: dict[str, Any] = {"seed": seed}
    if transforms is not None:
        context["transforms"] = transforms
    source = DATASETS.build(spec, path=path, **context)
    if isinstance(source, ContinualSplits):
        raise ConfigError(f"{spec['type']!r} is already a task sequence; name the classification dataset it is made of",
                          path=f"{path}.type")  # fmt: skip
    if not isinstance(source, DataSplits) or source.task != "classification":
        raise ConfigError(f"{spec['type']!r} is not a classification dataset", path=f"{path}.type")
    return source


@register_dataset("seq")
def seq(dataset: DatasetSpec, classes_per_task: PositiveInt, class_order: ClassOrder = "natural", flatten: bool = False,
        seed: int = 0, transforms: Optional[dict] = None) -> ContinualSplits:  # fmt: skip
    """Class-incremental tasks from any classification dataset: its classes in ``class_order``, cut
    into tasks of ``classes_per_task`` (both class-IL and task-IL accuracy are reported).

    Args:
        dataset: the dataset, as ``data:`` names one (``cifar10`` or ``{type: cifar10, args: {root: …}}``).
        classes_per_task: classes per task (must divide the dataset's classes).
        class_order: 'natural' (the dataset's order), 'seeded' (shuffled by the seed), 'mammoth'
            (Mammoth's --permute_classes with the seed), or the classes in task order.
        flatten: serve each sample as one vector (for an MLP).
        seed: seeds the dataset, the class order and the augmentation (wired from the config's seed).
        transforms: ``data.transforms``, handed to the dataset (wired from the config).
    """
    base = build_source(dataset, seed, transforms)
    return class_incremental(flattened(base) if flatten else base, classes_per_task=classes_per_task,
                             class_order=class_order, seed=seed)  # fmt: skip


def _image_source(base: DataSplits, what: str) -> bool:
    return split_kind(base.train, what) == "image"


@register_dataset("perm")
def perm(dataset: DatasetSpec, tasks: PositiveInt = 20, draws: Draws = "modforge", flatten: bool = False, seed: int = 0,
         transforms: Optional[dict] = None) -> ContinualSplits:  # fmt: skip
    """Domain-incremental tasks from any classification dataset: every task has all classes, the
    values of each sample (all of C×H×W) in the task's own fixed random order (Perm-MNIST's shape).

    Args:
        dataset: the dataset, as ``data:`` names one.
        tasks: number of tasks.
        draws: 'modforge' (torch's generator seeded with the seed) or 'mammoth' (NumPy's legacy one,
            as Mammoth's Perm-MNIST draws its permutations).
        flatten: serve each sample as one vector (for an MLP); otherwise the permuted sample keeps its shape.
        seed: seeds the dataset, the permutations and the augmentation (wired from the config's seed).
        transforms: ``data.transforms``, handed to the dataset (wired from the config).
    """
    base = build_source(dataset, seed, transforms)
    n = math.prod(base.input_shape)
    orders = task_permutations(n, tasks, seed, draws)
    splits = domain_incremental(base, [PixelPermutation(order, keep_shape=not flatten) for order in orders])
    if flatten:
        splits.in_dim, splits.layout, splits.input_shape = n, Layout.VECTOR, (n,)
    return splits


@register_dataset("rot")
def rot(dataset: DatasetSpec, tasks: PositiveInt = 20, min_angle: float = 0.0, max_angle: float = 180.0,
        draws: Draws = "modforge", interpolation: Optional[Literal["nearest", "bilinear"]] = None,
        flatten: bool = False, seed: int = 0, transforms: Optional[dict] = None) -> ContinualSplits:  # fmt: skip
    """Domain-incremental tasks from any classification dataset of images: every task has all
    classes, its images rotated by its own angle, uniform in [min_angle, max_angle) (Rot-MNIST's shape).

    Args:
        dataset: the dataset, as ``data:`` names one.
        tasks: number of tasks.
        min_angle: the smallest rotation in degrees.
        max_angle: the largest rotation in degrees (excluded).
        draws: 'modforge' (torch's generator seeded with the seed) or 'mammoth' (NumPy's legacy one,
            as Mammoth's Rot-MNIST draws its angles).
        interpolation: pictures are rotated before their pipeline, 'nearest' by default (Mammoth's);
            tensor datasets only 'bilinear' (the default for them).
        flatten: serve each sample as one vector (for an MLP).
        seed: seeds the dataset, the angles and the augmentation (wired from the config's seed).
        transforms: ``data.transforms``, handed to the dataset (wired from the config).
    """
    if not min_angle <= max_angle:
        raise ValueError(f"min_angle ({min_angle}) must not exceed max_angle ({max_angle})")
    base = build_source(dataset, seed, transforms)
    angles = task_angles(tasks, seed, min_angle, max_angle, draws)
    if _image_source(base, "rot"):
        rotations: list[Callable] = [PictureRotation(a, interpolation or "nearest") for a in angles]
    else:
        if interpolation not in (None, "bilinear"):
            raise ValueError("a tensor dataset's images are rotated bilinearly (interpolation: bilinear); "
                             "'nearest' is for picture datasets")  # fmt: skip
        rotations = [rotation(a) for a in angles]
    splits = domain_incremental(base, rotations)
    return flattened_sequence(splits) if flatten else splits


# ----------------------------------------------------------------------------- scikit-learn digits presets

@register_dataset("seq_digits")
def seq_digits(
    seed: int = 0,
    classes_per_task: int = 2,
    class_order: ClassOrder = None,
    as_image: bool = True,
    val_fraction: float = 0.15,
    test_fraction: float = 0.15,
) -> ContinualSplits:
    """Class-incremental digits: 5 tasks of 2 classes by default (Seq-MNIST's shape), the class
    order shuffled by the seed unless given.

    Args:
        seed: seeds the split and the class order (wired from the config's seed).
        classes_per_task: classes per task (must divide 10).
        class_order: the 10 digits in task order (None: shuffled by the seed; or 'natural',
            'seeded', 'mammoth' as for ``seq``).
        as_image: 1×8×8 images instead of 64-feature vectors.
        val_fraction: share held out for validation.
        test_fraction: share held out for testing.
    """
    base = digits(seed=seed, as_image=as_image, val_fraction=val_fraction, test_fraction=test_fraction)
    return class_incremental(base, classes_per_task=classes_per_task, class_order=class_order, seed=seed)


@register_dataset("perm_digits")
def perm_digits(
    seed: int = 0, tasks: int = 5, as_image: bool = False, val_fraction: float = 0.15, test_fraction: float = 0.15
) -> ContinualSplits:
    """Domain-incremental digits: every task has all 10 classes, its pixels in its own fixed
    random order (Perm-MNIST's shape).

    Args:
        seed: seeds the split and the permutations (wired from the config's seed).
        tasks: number of tasks.
        as_image: 1×8×8 images (permuted pixels) instead of 64-feature vectors.
        val_fraction: share held out for validation.
        test_fraction: share held out for testing.
    """
    if tasks < 1:
        raise ValueError(f"tasks must be at least 1, got {tasks}")
    base = digits(seed=seed, as_image=as_image, val_fraction=val_fraction, test_fraction=test_fraction)
    return domain_incremental(base, [PixelPermutation(order) for order in task_permutations(64, tasks, seed)])


@register_dataset("rot_digits")
def rot_digits(
    seed: int = 0, tasks: int = 5, max_angle: float = 180.0, val_fraction: float = 0.15, test_fraction: float = 0.15
) -> ContinualSplits:
    """Domain-incremental digits: every task has all 10 classes, its images rotated by its own
    angle drawn uniformly from [0, max_angle) (Rot-MNIST's shape).

    Args:
        seed: seeds the split and the angles (wired from the config's seed).
        tasks: number of tasks.
        max_angle: the largest rotation in degrees.
        val_fraction: share held out for validation.
        test_fraction: share held out for testing.
    """
    if tasks < 1:
        raise ValueError(f"tasks must be at least 1, got {tasks}")
    base = digits(seed=seed, as_image=True, val_fraction=val_fraction, test_fraction=test_fraction)
    return domain_incremental(base, [rotation(a) for a in task_angles(tasks, seed, 0.0, max_angle)])
