"""The fixed per-task transforms of domain-incremental sequences, and the seeded draws of them.

A task's transform is fixed for the whole run (a permutation of the values, a rotation by an
angle): :class:`PixelPermutation`, :class:`PictureRotation` and :class:`Flatten` say with
``stage`` whether they work on the uint8 pictures or on the float tensors, so a picture dataset
applies them as each sample is read. :func:`task_permutations` and :func:`task_angles` draw one
per task from the run's seed, with torch's generator or as Mammoth draws them (NumPy's legacy
generator). Sequences are assembled in :mod:`modforge.continual.sequences`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import torch

__all__ = [
    "Draws",
    "Flatten",
    "PictureRotation",
    "PixelPermutation",
    "chained",
    "numpy_seed",
    "permutation",
    "rotation",
    "task_angles",
    "task_permutations",
]

Draws = Literal["modforge", "mammoth"]
"""Where a domain-incremental sequence's per-task permutations or angles come from: 'modforge'
(a torch generator seeded with the run's seed) or 'mammoth' (NumPy's legacy generator seeded with
it, one draw per task — what Mammoth's Perm-/Rot-MNIST draw; see the benchmarks page)."""


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


def chained(first: Callable | None, then: Callable | None) -> Callable | None:
    """``first`` then ``then`` (either may be None: the other alone)."""
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


def numpy_seed(seed: int, what: str) -> int:
    """``seed``, checked to fit NumPy's legacy generator (``what``: the setting that seeds it, for the message)."""
    if not 0 <= seed < 2**32:
        raise ValueError(f"{what} seeds NumPy's legacy generator as Mammoth does, which takes seeds 0 … 2**32 − 1; "
                         f"got seed {seed}")  # fmt: skip
    return seed


def task_permutations(n_features: int, tasks: int, seed: int, draws: Draws = "modforge") -> list[torch.Tensor]:
    """One permutation of ``n_features`` per task: ``torch.randperm`` from a generator seeded with
    ``seed`` ('modforge'), or NumPy's ``RandomState(seed).permutation`` per task ('mammoth')."""
    if draws == "mammoth":
        import numpy as np

        state = np.random.RandomState(numpy_seed(seed, "draws: mammoth"))
        return [torch.from_numpy(state.permutation(n_features)).long() for _ in range(tasks)]
    generator = torch.Generator().manual_seed(seed % (1 << 63))
    return [torch.randperm(n_features, generator=generator) for _ in range(tasks)]


def task_angles(tasks: int, seed: int, min_angle: float = 0.0, max_angle: float = 180.0,
                draws: Draws = "modforge") -> list[float]:  # fmt: skip
    """One angle per task, uniform in [min_angle, max_angle): from a torch generator seeded with
    ``seed`` ('modforge', float32), or NumPy's ``RandomState(seed).uniform`` per task ('mammoth')."""
    if draws == "mammoth":
        import numpy as np

        state = np.random.RandomState(numpy_seed(seed, "draws: mammoth"))
        return [float(state.uniform(min_angle, max_angle)) for _ in range(tasks)]
    generator = torch.Generator().manual_seed(seed % (1 << 63))
    return (torch.rand(tasks, generator=generator) * (max_angle - min_angle) + min_angle).tolist()
