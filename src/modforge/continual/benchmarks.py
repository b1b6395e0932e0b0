"""Sequential benchmarks: a classification dataset turned into a sequence of tasks.

* **class-incremental** (``seq_digits``; Mammoth's Seq-MNIST/Seq-CIFAR-10 shape): the
  classes are put in an order (shuffled by the seed, or given) and cut into tasks of
  ``classes_per_task``; labels are renumbered by that order, so task ``t`` holds classes
  ``t·k … t·k + k − 1`` — what task-IL masking and class-IL argmax need.
* **domain-incremental** (``perm_digits``, ``rot_digits``; Perm-/Rot-MNIST): every task has
  all classes; each task applies its own fixed transform to the inputs — a random
  permutation of the features, or a rotation of the image by a random angle.

Every task keeps its own train/val/test splits (the test sets are what the accuracy
matrix is made of). The :class:`ContinualSplits` is also an ordinary
:class:`~modforge.data.base.DataSplits` whose splits are all tasks joined — the JOINT
upper bound trains on exactly that.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Optional

import torch

from ..core.registries import register_dataset
from ..data.base import ArrayDataset, DataSplits
from ..data.digits import digits

__all__ = ["ContinualSplits", "TaskSplit", "class_incremental", "domain_incremental"]


@dataclasses.dataclass
class TaskSplit:
    """One task: its classes (renumbered labels) and its splits."""

    task: int
    classes: list[int]
    train: ArrayDataset
    val: ArrayDataset | None
    test: ArrayDataset | None


@dataclasses.dataclass
class ContinualSplits(DataSplits):
    """DataSplits of the joined tasks, plus the tasks in order.

    Attributes:
        tasks: the task sequence.
        setting: 'class-il' (disjoint classes per task) or 'domain-il' (all classes, new inputs).
        class_order: original class of each renumbered label (class-IL).
    """

    tasks: list[TaskSplit] = dataclasses.field(default_factory=list)
    setting: str = "class-il"
    class_order: list[int] = dataclasses.field(default_factory=list)


def _labels_in(data: ArrayDataset | None, classes: Sequence[int]) -> ArrayDataset | None:
    if data is None:
        return None
    keep = torch.isin(data.labels, torch.as_tensor(list(classes)))
    return data.subset(keep.nonzero().reshape(-1))


def _relabel(data: ArrayDataset | None, mapping: torch.Tensor) -> ArrayDataset | None:
    return None if data is None else ArrayDataset(data.inputs, mapping[data.labels], data.ids)


def class_incremental(
    base: DataSplits, *, classes_per_task: int, class_order: Sequence[int] | None = None, seed: int = 0
) -> ContinualSplits:
    """``base`` as a class-incremental sequence (see the module doc).

    Raises:
        ValueError: an order that is not a permutation of the classes, or classes that do
            not divide into tasks of ``classes_per_task``.
    """
    n = base.num_classes
    if classes_per_task < 1 or n % classes_per_task:
        raise ValueError(f"{n} classes do not divide into tasks of {classes_per_task} (classes_per_task)")
    if class_order is None:
        order = torch.randperm(n, generator=torch.Generator().manual_seed(seed % (1 << 63))).tolist()
    else:
        order = [int(c) for c in class_order]
        if sorted(order) != list(range(n)):
            raise ValueError(f"class_order must list each of the {n} classes once, got {order}")
    mapping = torch.empty(n, dtype=torch.long)
    mapping[torch.tensor(order)] = torch.arange(n)
    train, val, test = (_relabel(s, mapping) for s in (base.train, base.val, base.test))
    tasks = []
    for t in range(n // classes_per_task):
        classes = list(range(t * classes_per_task, (t + 1) * classes_per_task))
        tasks.append(TaskSplit(t, classes, _labels_in(train, classes), _labels_in(val, classes), _labels_in(test, classes)))
    names = [base.class_names[c] for c in order]
    return ContinualSplits(
        **{**_fields(base), "train": train, "val": val, "test": test, "class_names": names},
        tasks=tasks,
        setting="class-il",
        class_order=order,
    )


def domain_incremental(
    base: DataSplits, transforms: Sequence[Callable[[torch.Tensor], torch.Tensor]]
) -> ContinualSplits:
    """One task per transform of the inputs, every task with all classes."""
    tasks = []
    for t, transform in enumerate(transforms):
        def apply(data: ArrayDataset | None, transform=transform) -> ArrayDataset | None:
            return None if data is None else ArrayDataset(transform(data.inputs), data.labels, data.ids)

        tasks.append(TaskSplit(t, list(range(base.num_classes)), apply(base.train), apply(base.val), apply(base.test)))
    joined = {
        split: ArrayDataset.concat([getattr(task, split) for task in tasks]) if getattr(base, split) is not None else None
        for split in ("train", "val", "test")
    }
    return ContinualSplits(**{**_fields(base), **joined}, tasks=tasks, setting="domain-il")


def _fields(base: DataSplits) -> dict:
    return {f.name: getattr(base, f.name) for f in dataclasses.fields(DataSplits)}


def permutation(n_features: int, generator: torch.Generator) -> Callable[[torch.Tensor], torch.Tensor]:
    """A fixed random permutation of the features of every sample (any input shape)."""
    order = torch.randperm(n_features, generator=generator)

    def apply(x: torch.Tensor) -> torch.Tensor:
        return x.reshape(len(x), -1)[:, order].reshape(x.shape)

    return apply


def rotation(degrees: float) -> Callable[[torch.Tensor], torch.Tensor]:
    """Rotate ``[N, C, H, W]`` images by ``degrees`` about their centre (bilinear, zeros outside)."""
    import torch.nn.functional as F

    angle = math.radians(degrees)
    matrix = torch.tensor([[math.cos(angle), -math.sin(angle), 0.0], [math.sin(angle), math.cos(angle), 0.0]])

    def apply(x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4:
            raise ValueError(f"rotation needs images [N, C, H, W], got shape {tuple(x.shape)} (use as_image: true)")
        grid = F.affine_grid(matrix.expand(len(x), 2, 3).to(x), list(x.shape), align_corners=False)
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)

    return apply


@register_dataset("seq_digits")
def seq_digits(
    seed: int = 0,
    classes_per_task: int = 2,
    class_order: Optional[list[int]] = None,
    as_image: bool = True,
    val_fraction: float = 0.15,
    test_fraction: float = 0.15,
) -> ContinualSplits:
    """Class-incremental digits: 5 tasks of 2 classes by default (Seq-MNIST's shape), the class
    order shuffled by the seed unless given.

    Args:
        seed: seeds the split and the class order (wired from the config's seed).
        classes_per_task: classes per task (must divide 10).
        class_order: the 10 digits in task order (None: shuffled by the seed).
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
    generator = torch.Generator().manual_seed(seed % (1 << 63))
    return domain_incremental(base, [permutation(64, generator) for _ in range(tasks)])


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
    generator = torch.Generator().manual_seed(seed % (1 << 63))
    angles = (torch.rand(tasks, generator=generator) * max_angle).tolist()
    return domain_incremental(base, [rotation(a) for a in angles])
