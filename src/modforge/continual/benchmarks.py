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
``seq_cifar10``, …) are presets in :mod:`modforge.continual.mammoth`.

Every task keeps its own train/val/test splits (the test sets are what the accuracy matrix is
made of). The :class:`ContinualSplits` is also an ordinary :class:`~modforge.data.base.DataSplits`
whose splits are all tasks joined — the JOINT upper bound trains on exactly that.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal, Optional, Union

import torch

from ..core.constraints import PositiveInt
from ..core.errors import ConfigError
from ..core.layouts import Layout
from ..core.registries import DATASETS, register_dataset
from ..data.base import ArrayDataset, DataSplits
from ..data.digits import digits
from ..data.images.dataset import ImageDataset, JoinedImageDataset

__all__ = [
    "ClassOrder",
    "ContinualSplits",
    "Flatten",
    "PictureRotation",
    "PixelPermutation",
    "TaskSplit",
    "class_incremental",
    "class_order_for",
    "concat_splits",
    "domain_incremental",
    "flattened",
    "flattened_split",
    "permutation",
    "rotation",
    "task_angles",
    "task_permutations",
]

ClassOrder = Union[Literal["natural", "seeded", "mammoth"], list[int], None]
"""How classes are put in task order: 'natural' (the dataset's label order), 'seeded' (shuffled by
torch's generator seeded with the run's seed; None means this too), 'mammoth' (Mammoth's
``--permute_classes 1``: NumPy's ``np.random.seed(seed); np.random.permutation(n)``), or the
classes themselves in task order (task 0 gets the first ``classes_per_task``)."""

Draws = Literal["modforge", "mammoth"]
"""Where a domain-incremental sequence's per-task permutations or angles come from: 'modforge'
(a torch generator seeded with the run's seed) or 'mammoth' (NumPy's legacy generator seeded with
it, one draw per task — what Mammoth's Perm-/Rot-MNIST draw; see the benchmarks page)."""

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


# ----------------------------------------------------------------------------- fixed task transforms
class PixelPermutation:
    """A fixed permutation of each sample's values (all of C×H×W, in memory order), on a batch
    ``[B, ...]``; ``keep_shape``: give the batch its shape back (else ``[B, N]``)."""

    stage = "tensor"

    def __init__(self, order: torch.Tensor, keep_shape: bool = True):
        self.order, self.keep_shape = torch.as_tensor(order, dtype=torch.long), keep_shape

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.reshape(len(x), -1).shape[1] != len(self.order):
            raise ValueError(f"a permutation of {len(self.order)} values cannot reorder samples of shape "
                             f"{tuple(x.shape[1:])}")  # fmt: skip
        out = x.reshape(len(x), -1)[:, self.order]
        return out.reshape(x.shape) if self.keep_shape else out


class PictureRotation:
    """Rotate uint8 pictures ``[B, C, H, W]`` by ``degrees`` about their centre, keeping their size,
    zeros outside: torchvision v2's ``rotate`` on each picture as a PIL image — what Mammoth's Rot-MNIST
    does (nearest neighbour). v2's tensor kernel is not used: at some angles it rounds one or two
    border pixels differently from the PIL kernel."""

    stage = "picture"

    def __init__(self, degrees: float, interpolation: Literal["nearest", "bilinear"] = "nearest"):
        self.degrees, self.interpolation = float(degrees), interpolation

    def __call__(self, pictures: torch.Tensor) -> torch.Tensor:
        import numpy as np
        from PIL import Image
        from torchvision.transforms import InterpolationMode
        from torchvision.transforms.v2 import functional as F

        mode = InterpolationMode.NEAREST if self.interpolation == "nearest" else InterpolationMode.BILINEAR
        out = torch.empty_like(pictures)
        for i, picture in enumerate(pictures):
            grey = picture.shape[0] == 1
            array = picture[0].numpy() if grey else picture.permute(1, 2, 0).numpy()
            turned = np.asarray(F.rotate(Image.fromarray(array, mode="L" if grey else "RGB"), self.degrees,
                                         interpolation=mode))  # fmt: skip
            out[i] = torch.from_numpy(turned.copy()).reshape(picture.shape[1:]) if grey else \
                torch.from_numpy(turned.copy()).permute(2, 0, 1)  # fmt: skip
        return out


class Flatten:
    """Each sample as one vector: ``[B, ...]`` → ``[B, N]`` (what an MLP such as Mammoth's MNISTMLP reads)."""

    stage = "tensor"

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(len(x), -1)


class _Chain:
    """Fixed transforms one after the other (picklable, unlike a closure)."""

    def __init__(self, first: Callable[[torch.Tensor], torch.Tensor], then: Callable[[torch.Tensor], torch.Tensor]):
        self.first, self.then = first, then

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.then(self.first(x))


def _then(first: Callable | None, then: Callable | None) -> Callable | None:
    if first is None or then is None:
        return first if then is None else then
    return _Chain(first, then)


def permutation(n_features: int, generator: torch.Generator) -> PixelPermutation:
    """A fixed random permutation of the features of every sample (any input shape)."""
    return PixelPermutation(torch.randperm(n_features, generator=generator))


def rotation(degrees: float) -> Callable[[torch.Tensor], torch.Tensor]:
    """Rotate float ``[N, C, H, W]`` images by ``degrees`` about their centre (bilinear, zeros
    outside) — how tensors are rotated; pictures are rotated by :class:`PictureRotation`."""
    import torch.nn.functional as F

    angle = math.radians(degrees)
    matrix = torch.tensor([[math.cos(angle), -math.sin(angle), 0.0], [math.sin(angle), math.cos(angle), 0.0]])

    def apply(x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4:
            raise ValueError(f"rotation needs images [N, C, H, W], got shape {tuple(x.shape)} (use as_image: true)")
        grid = F.affine_grid(matrix.expand(len(x), 2, 3).to(x), list(x.shape), align_corners=False)
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)

    return apply


def _numpy_seed(seed: int, what: str) -> int:
    if not 0 <= seed < 2**32:
        raise ValueError(f"{what} seeds NumPy's legacy generator as Mammoth does, which takes seeds 0 … 2**32 − 1; "
                         f"got seed {seed}")  # fmt: skip
    return seed


def task_permutations(n_features: int, tasks: int, seed: int, draws: Draws = "modforge") -> list[torch.Tensor]:
    """One permutation of ``n_features`` per task: ``torch.randperm`` from a generator seeded with
    ``seed`` ('modforge'), or NumPy's ``RandomState(seed).permutation`` per task ('mammoth')."""
    if draws == "mammoth":
        import numpy as np

        state = np.random.RandomState(_numpy_seed(seed, "draws: mammoth"))
        return [torch.from_numpy(state.permutation(n_features)).long() for _ in range(tasks)]
    generator = torch.Generator().manual_seed(seed % (1 << 63))
    return [torch.randperm(n_features, generator=generator) for _ in range(tasks)]


def task_angles(tasks: int, seed: int, min_angle: float = 0.0, max_angle: float = 180.0,
                draws: Draws = "modforge") -> list[float]:  # fmt: skip
    """One angle per task, uniform in [min_angle, max_angle): from a torch generator seeded with
    ``seed`` ('modforge', float32), or NumPy's ``RandomState(seed).uniform`` per task ('mammoth')."""
    if draws == "mammoth":
        import numpy as np

        state = np.random.RandomState(_numpy_seed(seed, "draws: mammoth"))
        return [float(state.uniform(min_angle, max_angle)) for _ in range(tasks)]
    generator = torch.Generator().manual_seed(seed % (1 << 63))
    return (torch.rand(tasks, generator=generator) * (max_angle - min_angle) + min_angle).tolist()


# ----------------------------------------------------------------------------- splits of any kind
def _kind(data: Any, what: str) -> str:
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
    if _kind(data, "a class-incremental sequence") == "array":
        return ArrayDataset(data.inputs, mapping[data.labels], data.ids)
    if isinstance(data, JoinedImageDataset):
        return JoinedImageDataset([part.relabelled(mapping) for part in data.parts])
    return data.relabelled(mapping)


def _with_task_transform(data: Split | None, transform: Callable[[torch.Tensor], torch.Tensor]) -> Split | None:
    """``data`` with a task's fixed transform: applied to the tensors now, or to pictures as read."""
    if data is None:
        return None
    if _kind(data, "a domain-incremental sequence") == "array":
        return ArrayDataset(transform(data.inputs), data.labels, data.ids)
    stage = getattr(transform, "stage", None)
    if stage not in ("picture", "tensor"):
        raise TypeError("a picture dataset's task transform must say whether it works on the uint8 pictures or on "
                        "the float tensors (a PixelPermutation, PictureRotation or Flatten)")  # fmt: skip
    if isinstance(data, JoinedImageDataset):
        return JoinedImageDataset([_with_task_transform(part, transform) for part in data.parts])
    if stage == "picture":
        return data.with_fixed_transforms(picture=_then(data.picture_transform, transform), tensor=data.tensor_transform)
    return data.with_fixed_transforms(picture=data.picture_transform, tensor=_then(data.tensor_transform, transform))


def concat_splits(parts: Sequence[Split]) -> Split:
    """One split holding every part's samples in order, each served as its part serves it (the
    JOINT upper bound's training data; a domain-incremental sequence's joined splits)."""
    kinds = {_kind(p, "joining tasks") for p in parts}
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
    fields = _fields(base)
    fields.update(train=flattened_split(base.train), val=flattened_split(base.val), test=flattened_split(base.test),
                  in_dim=n, layout=Layout.VECTOR, input_shape=(n,))  # fmt: skip
    return DataSplits(**fields)


def flattened_split(data: Split | None) -> Split | None:
    """One split with every sample as one vector."""
    if data is None:
        return None
    if _kind(data, "flatten") == "array":
        return ArrayDataset(data.inputs.reshape(len(data.inputs), -1), data.labels, data.ids)
    return _with_task_transform(data, Flatten())


def _fields(base: DataSplits) -> dict:
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

        perm = np.random.RandomState(_numpy_seed(seed, "class_order: mammoth")).permutation(n)
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
        **{**_fields(base), "train": train, "val": val, "test": test, "class_names": names},
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
    return ContinualSplits(**{**_fields(base), **joined}, tasks=tasks, setting="domain-il")


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
    return _kind(base.train, what) == "image"


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
    return _flatten_sequence(splits) if flatten else splits


def _flatten_sequence(splits: ContinualSplits) -> ContinualSplits:
    """A sequence whose samples are served as vectors (the tasks' transforms first)."""
    flat = flattened(splits)
    tasks = [TaskSplit(t.task, t.classes, *(flattened_split(getattr(t, s)) for s in ("train", "val", "test")))
             for t in splits.tasks]  # fmt: skip
    return ContinualSplits(**_fields(flat), tasks=tasks, setting=splits.setting, class_order=splits.class_order)



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


from . import mammoth as _mammoth  # noqa: E402,F401  (Mammoth's presets register with the rest)
