"""Task sequences made of a classification dataset's splits: the two kinds (class-incremental and
domain-incremental), the :class:`ContinualSplits` they give, and the split plumbing under them.

A split is held as tensors (:class:`~modforge.data.base.ArrayDataset`: relabelled and transformed
once, when the sequence is built) or as pictures (:class:`~modforge.data.images.dataset.ImageDataset`:
a task's fixed transform is applied as each sample is read). The registered datasets built from
these are in :mod:`modforge.continual.benchmarks` (any dataset, digits) and
:mod:`modforge.continual.mammoth` (Mammoth's presets); both import this module, neither the other
back.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal, Union

import torch

from ..core.layouts import Layout
from ..data.base import ArrayDataset, DataSplits
from ..data.images.dataset import ImageDataset, JoinedImageDataset
from .task_transforms import Flatten, chained, numpy_seed

__all__ = [
    "ClassOrder",
    "ContinualSplits",
    "Split",
    "TaskSplit",
    "class_incremental",
    "class_order_for",
    "concat_splits",
    "domain_incremental",
    "flattened",
    "flattened_sequence",
    "flattened_split",
    "split_fields",
    "split_kind",
]

ClassOrder = Union[Literal["natural", "seeded", "mammoth"], list[int], None]
"""How classes are put in task order: 'natural' (the dataset's label order), 'seeded' (shuffled by
torch's generator seeded with the run's seed; None means this too), 'mammoth' (Mammoth's
``--permute_classes 1``: NumPy's ``np.random.seed(seed); np.random.permutation(n)``), or the
classes themselves in task order (task 0 gets the first ``classes_per_task``)."""

Split = Union[ArrayDataset, ImageDataset, JoinedImageDataset]


@dataclasses.dataclass
class TaskSplit:
    """One task: its classes (renumbered labels) and its splits."""

    task: int
    classes: list[int]
    train: Any
    val: Any
    test: Any


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



def split_kind(data: Any, what: str) -> str:
    """'array' (tensors) or 'image' (pictures); any other split is refused (``what``: for the message)."""
    if isinstance(data, ArrayDataset):
        return "array"
    if isinstance(data, (ImageDataset, JoinedImageDataset)):
        return "image"
    raise TypeError(f"{what} needs splits held as tensors (ArrayDataset) or pictures (ImageDataset); "
                    f"this dataset's are {type(data).__name__}")  # fmt: skip


def _labels_in(data: Split | None, classes: Sequence[int]) -> Split | None:
    if data is None:
        return None
    keep = torch.isin(data.labels, torch.as_tensor(list(classes)))
    return data.subset(keep.nonzero().reshape(-1))


def _relabel(data: Split | None, mapping: torch.Tensor) -> Split | None:
    if data is None:
        return None
    if split_kind(data, "a class-incremental sequence") == "array":
        return ArrayDataset(data.inputs, mapping[data.labels], data.ids)
    if isinstance(data, JoinedImageDataset):
        return JoinedImageDataset([part.relabelled(mapping) for part in data.parts])
    return data.relabelled(mapping)


def _with_task_transform(data: Split | None, transform: Callable[[torch.Tensor], torch.Tensor]) -> Split | None:
    """``data`` with a task's fixed transform: applied to the tensors now, or to pictures as read."""
    if data is None:
        return None
    if split_kind(data, "a domain-incremental sequence") == "array":
        return ArrayDataset(transform(data.inputs), data.labels, data.ids)
    stage = getattr(transform, "stage", None)
    if stage not in ("picture", "tensor"):
        raise TypeError("a picture dataset's task transform must say whether it works on the uint8 pictures or on "
                        "the float tensors (a PixelPermutation, PictureRotation or Flatten)")  # fmt: skip
    if isinstance(data, JoinedImageDataset):
        return JoinedImageDataset([_with_task_transform(part, transform) for part in data.parts])
    if stage == "picture":
        return data.with_fixed_transforms(picture=chained(data.picture_transform, transform), tensor=data.tensor_transform)
    return data.with_fixed_transforms(picture=data.picture_transform, tensor=chained(data.tensor_transform, transform))


def concat_splits(parts: Sequence[Split]) -> Split:
    """One split holding every part's samples in order, each served as its part serves it (the
    JOINT upper bound's training data; a domain-incremental sequence's joined splits)."""
    kinds = {split_kind(p, "joining tasks") for p in parts}
    if kinds == {"array"}:
        return ArrayDataset.concat(parts)  # type: ignore[arg-type]
    if kinds == {"image"}:
        if any(isinstance(p, JoinedImageDataset) for p in parts):
            return JoinedImageDataset(parts)  # type: ignore[arg-type]
        return ImageDataset.concat(parts)  # type: ignore[arg-type]
    raise TypeError("cannot join tensor splits with picture splits")


def flattened(base: DataSplits) -> DataSplits:
    """``base`` with every sample as one vector (``[N]``, layout vector): what an MLP reads."""
    n = math.prod(base.input_shape)
    fields = split_fields(base)
    fields.update(train=flattened_split(base.train), val=flattened_split(base.val), test=flattened_split(base.test),
                  in_dim=n, layout=Layout.VECTOR, input_shape=(n,))  # fmt: skip
    return DataSplits(**fields)


def flattened_split(data: Split | None) -> Split | None:
    """One split with every sample as one vector."""
    if data is None:
        return None
    if split_kind(data, "flatten") == "array":
        return ArrayDataset(data.inputs.reshape(len(data.inputs), -1), data.labels, data.ids)
    return _with_task_transform(data, Flatten())


def split_fields(base: DataSplits) -> dict:
    """``base``'s :class:`~modforge.data.base.DataSplits` fields, to build a changed copy from."""
    return {f.name: getattr(base, f.name) for f in dataclasses.fields(DataSplits)}


# ----------------------------------------------------------------------------- the two kinds of sequence
def class_order_for(n: int, class_order: ClassOrder, seed: int) -> list[int]:
    """The ``n`` classes in task order (see :data:`ClassOrder`).

    Raises:
        ValueError: a given order that is not a permutation of the classes.
    """
    if class_order is None or class_order == "seeded":
        return torch.randperm(n, generator=torch.Generator().manual_seed(seed % (1 << 63))).tolist()
    if class_order == "natural":
        return list(range(n))
    if class_order == "mammoth":  # Mammoth maps original class c to label perm[c]; the classes in order are its inverse
        import numpy as np

        perm = np.random.RandomState(numpy_seed(seed, "class_order: mammoth")).permutation(n)
        return [int(c) for c in np.argsort(perm)]
    if isinstance(class_order, str):
        raise ValueError(f"class_order must be 'natural', 'seeded', 'mammoth' or the classes in task order, "
                         f"got {class_order!r}")  # fmt: skip
    order = [int(c) for c in class_order]
    if sorted(order) != list(range(n)):
        raise ValueError(f"class_order must list each of the {n} classes once, got {order}")
    return order


def class_incremental(
    base: DataSplits, *, classes_per_task: int, class_order: ClassOrder = None, seed: int = 0
) -> ContinualSplits:
    """``base`` as a class-incremental sequence (see the module doc).

    Raises:
        ValueError: an order that is not a permutation of the classes, or classes that do
            not divide into tasks of ``classes_per_task``.
    """
    n = base.num_classes
    if classes_per_task < 1 or n % classes_per_task:
        raise ValueError(f"{n} classes do not divide into tasks of {classes_per_task} (classes_per_task)")
    order = class_order_for(n, class_order, seed)
    mapping = torch.empty(n, dtype=torch.long)
    mapping[torch.tensor(order)] = torch.arange(n)
    train, val, test = (_relabel(s, mapping) for s in (base.train, base.val, base.test))
    tasks = []
    for t in range(n // classes_per_task):
        classes = list(range(t * classes_per_task, (t + 1) * classes_per_task))
        tasks.append(TaskSplit(t, classes, _labels_in(train, classes), _labels_in(val, classes), _labels_in(test, classes)))
    names = [base.class_names[c] for c in order]
    return ContinualSplits(
        **{**split_fields(base), "train": train, "val": val, "test": test, "class_names": names},
        tasks=tasks,
        setting="class-il",
        class_order=order,
    )


def domain_incremental(
    base: DataSplits, transforms: Sequence[Callable[[torch.Tensor], torch.Tensor]]
) -> ContinualSplits:
    """One task per transform of the inputs, every task with all classes. For tensor splits a
    transform takes the whole ``[N, ...]`` inputs; for picture splits it is a fixed transform with a
    ``stage`` (:class:`PictureRotation`, :class:`PixelPermutation`), applied as samples are read."""
    tasks = []
    for t, transform in enumerate(transforms):
        splits = (_with_task_transform(getattr(base, s), transform) for s in ("train", "val", "test"))
        tasks.append(TaskSplit(t, list(range(base.num_classes)), *splits))
    joined = {
        split: concat_splits([getattr(task, split) for task in tasks]) if getattr(base, split) is not None else None
        for split in ("train", "val", "test")
    }
    return ContinualSplits(**{**split_fields(base), **joined}, tasks=tasks, setting="domain-il")



def flattened_sequence(splits: ContinualSplits) -> ContinualSplits:
    """A sequence whose samples are served as vectors (the tasks' transforms first)."""
    flat = flattened(splits)
    tasks = [TaskSplit(t.task, t.classes, *(flattened_split(getattr(t, s)) for s in ("train", "val", "test")))
             for t in splits.tasks]  # fmt: skip
    return ContinualSplits(**split_fields(flat), tasks=tasks, setting=splits.setting, class_order=splits.class_order)
