"""Image transforms chosen by name in YAML, built from torchvision's ``transforms.v2``.

A config names the transforms of each split (``data.transforms``)::

    data:
      type: cifar10
      args: {root: data/cifar}
      transforms:
        train: [{type: random_crop, args: {size: 32, padding: 4}}, random_horizontal_flip]
        eval: []
        mix: {mixup_alpha: 0.8, cutmix_alpha: 1.0}

Every name maps to one v2 class (:data:`TRANSFORMS`; the v2 class name itself works too);
nothing else can be built, so a config never names code. A sample goes through
``[transforms on uint8 pictures] → float in [0, 1] → normalise → [transforms on float
tensors]``: the dataset's normalisation (its mean/std, recorded for export and predict) is
placed before the first transform that needs float values (``random_erasing``,
``gaussian_noise``), or where the list names ``normalize`` itself (which then replaces it).

Randomness: v2 transforms draw from torch's default CPU generator. :class:`SampleRandomness`
seeds that generator for each sample from ``(seed, epoch, sample index)`` and gives its state
back afterwards, so an augmented sample is a pure function of those three numbers — the same
in any worker, for any number of workers, after any resume — and the training process's own
random stream (dropout, …) is untouched.

Whole batches: for pictures held in memory, :meth:`ImagePipeline.batch` does the geometric
transforms (crops, padding, flips) of a whole batch in a few tensor operations with the very
draws v2 makes under each sample's seed (:mod:`.batched`) — the same pictures, bit for bit,
in a fraction of the time, on the CPU or on the device the pictures live on. A list with
anything else (colour, rotation, auto-augment policies) goes one picture at a time, and says
so once. ``data.transforms.batched: false`` turns the batched path off.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from ...core.errors import ConfigError

log = logging.getLogger("modforge.data")

__all__ = [
    "FLOAT_TRANSFORMS",
    "TRANSFORMS",
    "ImagePipeline",
    "SampleRandomness",
    "build_transforms",
    "sample_seed",
    "sample_seed_array",
    "sample_seeds",
]

TRANSFORMS: dict[str, str] = {
    "random_crop": "RandomCrop",
    "random_resized_crop": "RandomResizedCrop",
    "resize": "Resize",
    "center_crop": "CenterCrop",
    "pad": "Pad",
    "random_horizontal_flip": "RandomHorizontalFlip",
    "random_vertical_flip": "RandomVerticalFlip",
    "random_rotation": "RandomRotation",
    "random_affine": "RandomAffine",
    "random_perspective": "RandomPerspective",
    "random_zoom_out": "RandomZoomOut",
    "elastic": "ElasticTransform",
    "color_jitter": "ColorJitter",
    "grayscale": "Grayscale",
    "random_grayscale": "RandomGrayscale",
    "random_equalize": "RandomEqualize",
    "random_invert": "RandomInvert",
    "random_posterize": "RandomPosterize",
    "random_solarize": "RandomSolarize",
    "random_autocontrast": "RandomAutocontrast",
    "random_adjust_sharpness": "RandomAdjustSharpness",
    "random_photometric_distort": "RandomPhotometricDistort",
    "gaussian_blur": "GaussianBlur",
    "auto_augment": "AutoAugment",
    "rand_augment": "RandAugment",
    "trivial_augment": "TrivialAugmentWide",
    "augmix": "AugMix",
    "random_erasing": "RandomErasing",
    "gaussian_noise": "GaussianNoise",
    "normalize": "Normalize",
}
"""modforge name → ``torchvision.transforms.v2`` class (the class name is accepted as well)."""

FLOAT_TRANSFORMS = frozenset({"RandomErasing", "GaussianNoise", "Normalize"})
"""v2 classes that work on float tensors: the sample is converted (and normalised) before them."""

_ENUM_ARGS = {"interpolation": "InterpolationMode", "policy": "AutoAugmentPolicy"}
"""Arguments given as strings in YAML that v2 takes as enums (``interpolation: bicubic``)."""


def _v2() -> Any:
    from torchvision.transforms import v2

    return v2


def _class_name(name: str, path: str) -> str:
    if name in TRANSFORMS:
        return TRANSFORMS[name]
    if name in TRANSFORMS.values():
        return name
    import difflib

    close = difflib.get_close_matches(name, [*TRANSFORMS, *TRANSFORMS.values()], n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise ConfigError(f"unknown image transform {name!r}{hint} (known: {', '.join(TRANSFORMS)})", path=path)


def _enum_value(arg: str, value: Any, path: str) -> Any:
    if not isinstance(value, str):
        return value
    import torchvision.transforms as tv

    enum = getattr(tv, _ENUM_ARGS[arg])
    for member in enum:
        if value.lower() in (member.name.lower(), str(member.value).lower()):
            return member
    choices = ", ".join(m.name.lower() for m in enum)
    raise ConfigError(f"{value!r} is not a valid {arg} (expected one of: {choices})", path=f"{path}.args.{arg}")


def _spec(entry: Any, path: str) -> tuple[str, dict[str, Any]]:
    if isinstance(entry, str):
        return entry, {}
    if isinstance(entry, dict) and isinstance(entry.get("type"), str) and set(entry) <= {"type", "args"}:
        args = entry.get("args") or {}
        if not isinstance(args, dict):
            raise ConfigError(f"args must be a mapping, got {type(args).__name__}", path=f"{path}.args")
        return entry["type"], dict(args)
    raise ConfigError(
        f"expected a transform name or {{type: NAME, args: {{...}}}}, got {entry!r}", path=path
    )


def build_transform(entry: Any, path: str) -> Any:
    """One v2 transform from a config entry (a name, or ``{type, args}``); errors name ``path``."""
    name, args = _spec(entry, path)
    cls_name = _class_name(name, path)
    cls = getattr(_v2(), cls_name, None)
    if cls is None:  # an older torchvision without this class
        raise ConfigError(f"image transform {name!r} needs a newer torchvision (no v2.{cls_name} here)", path=path)
    args = {k: (_enum_value(k, v, path) if k in _ENUM_ARGS else v) for k, v in args.items()}
    for key in ("size", "fill", "mean", "std", "kernel_size", "sigma", "scale", "ratio", "degrees", "translate"):
        if isinstance(args.get(key), list):
            args[key] = tuple(args[key]) if key not in ("mean", "std", "size") else list(args[key])
    try:
        inspect.signature(cls).bind(**args)
        return cls(**args)
    except TypeError as exc:
        raise ConfigError(f"image transform {name!r}: {exc} (its arguments: {_arguments(cls)})", path=path) from None
    except ValueError as exc:
        raise ConfigError(f"image transform {name!r}: {exc}", path=path) from None


def _arguments(cls: type) -> str:
    return ", ".join(p for p in inspect.signature(cls).parameters if p not in ("self",)) or "none"


def build_transforms(entries: Sequence[Any] | None, path: str) -> list[Any]:
    """The v2 transforms a config list names, in order."""
    if entries is None:
        return []
    if not isinstance(entries, (list, tuple)):
        raise ConfigError(f"expected a list of transforms, got {type(entries).__name__}", path=path)
    return [build_transform(entry, f"{path}.{i}") for i, entry in enumerate(entries)]


def sample_seed(seed: int, epoch: int, index: int, stream: int = 0) -> int:
    """A 63-bit seed that is a pure function of its four integers (SplitMix64 mixing): one
    sample's randomness in one epoch (``stream`` separates independent draws, e.g. a sample's
    transforms from its batch's mixing)."""
    mask = (1 << 64) - 1
    state = 0
    for value in (seed, epoch, index, stream):
        state = (state + (int(value) & mask) + 0x9E3779B97F4A7C15) & mask
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        state = z ^ (z >> 31)
    return state >> 1


def sample_seeds(seed: int, epoch: int, indices: torch.Tensor | Sequence[int], stream: int = 0) -> list[int]:
    """:func:`sample_seed` of many samples at once (the same numbers, in numpy's wrapping uint64
    arithmetic: a whole batch's seeds in a few array operations)."""
    return sample_seed_array(seed, epoch, indices, stream).tolist()


def sample_seed_array(seed: int, epoch: int, indices: torch.Tensor | Sequence[int], stream: int = 0) -> Any:
    """:func:`sample_seeds` as a numpy uint64 array (each below 2**63)."""
    import numpy as np

    ids = torch.as_tensor(indices, dtype=torch.int64).cpu().numpy().astype(np.uint64)  # two's complement: & mask
    mask = (1 << 64) - 1
    state = np.zeros(len(ids), dtype=np.uint64)
    golden, mul1, mul2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
    with np.errstate(over="ignore"):
        for value in (seed, epoch, ids, stream):
            term = value if isinstance(value, np.ndarray) else np.uint64(int(value) & mask)
            z = state + term + golden
            z = (z ^ (z >> np.uint64(30))) * mul1
            z = (z ^ (z >> np.uint64(27))) * mul2
            state = z ^ (z >> np.uint64(31))
    return state >> np.uint64(1)


class SampleRandomness:
    """Seeds torch's default CPU generator per sample and restores it afterwards (see the module doc)."""

    @staticmethod
    @contextlib.contextmanager
    def kept() -> Iterator[None]:
        """While open, :meth:`seed` may be called freely; the generator's state comes back on exit."""
        generator = torch.default_generator
        state = generator.get_state()
        try:
            yield
        finally:
            generator.set_state(state)

    @staticmethod
    def seed(value: int) -> None:
        torch.default_generator.manual_seed(value)


class ImagePipeline:
    """What happens to one picture (a uint8 ``[C, H, W]`` tensor) on its way to the model — or to
    a whole batch of them at once (:meth:`batch`), with the same result.

    Args:
        before: v2 transforms on the uint8 picture (crops, flips, colour, auto-augment policies).
        mean, std: per-channel normalisation after scaling to [0, 1] (None: none).
        after: v2 transforms on the normalised float tensor (random erasing, noise).
        batched: whether :meth:`batch` may transform whole batches (``data.transforms.batched``).
        name: the config key of the list, named when a batch is augmented one picture at a time.
    """

    def __init__(self, before: Sequence[Any], mean: Sequence[float] | None, std: Sequence[float] | None,
                 after: Sequence[Any] = (), *, batched: bool = True, name: str = "data.transforms"):  # fmt: skip
        self.before, self.after = list(before), list(after)
        self.mean = None if mean is None else torch.tensor(mean, dtype=torch.float32).view(-1, 1, 1)
        self.std = None if std is None else torch.tensor(std, dtype=torch.float32).view(-1, 1, 1)
        self.batched, self.name = bool(batched), name
        self._plans: dict[tuple[int, int], Any] = {}
        self._on: dict[torch.device, tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]] = {}

    @property
    def random(self) -> bool:
        """True when a sample's result depends on the random stream (any transform at all is
        treated as possibly random: Resize is not, but costs nothing to seed)."""
        return bool(self.before or self.after)

    def to_float(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 pictures (one ``[C, H, W]`` or a batch ``[B, C, H, W]``) as normalised float32 — the
        same numbers on every device: off the CPU the 255 is a tensor there, because CUDA divides
        by a host scalar as a product with its reciprocal, one rounding away from the CPU's
        quotient (measured on an H200: batches made on the GPU were not the host's)."""
        out = images.to(torch.float32)
        if out.device.type == "cpu":
            out = out.div_(255.0)
        else:
            out = out.div_(self._constants(out.device)[0])
        if self.mean is not None:
            _, mean, std = self._constants(out.device)
            out = out.sub_(mean).div_(std)
        return out

    def _constants(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """255, the mean and the std on ``device`` (copied there once)."""
        if device not in self._on:
            on = (lambda t: None if t is None else t.to(device))  # noqa: E731
            self._on[device] = (torch.tensor(255.0, device=device), on(self.mean), on(self.std))
        return self._on[device]

    def geometry(self, picture: torch.Tensor) -> torch.Tensor:
        """The transforms on the uint8 picture alone (``before``: no conversion to float)."""
        for transform in self.before:
            picture = transform(picture)
        return picture

    def __call__(self, picture: torch.Tensor) -> torch.Tensor:
        picture = self.to_float(self.geometry(picture))
        for transform in self.after:
            picture = transform(picture)
        return picture

    def plan(self, height: int, width: int) -> Any:
        """The batched form of ``before`` for pictures of this size (:mod:`.batched`), or None —
        then the reason is logged, once per list and size."""
        key = (int(height), int(width))
        if key not in self._plans:
            from .batched import batch_plan

            plan = batch_plan(self.before, *key) if self.batched else f"{self.name.rsplit('.', 1)[0]}.batched is false"
            if isinstance(plan, str):
                log.info("%s: %s, so these pictures are augmented one at a time (torchvision v2 per sample)",
                         self.name, plan)  # fmt: skip
                plan = None
            self._plans[key] = plan
        return self._plans[key]

    def batch(self, pictures: torch.Tensor, seeds: Sequence[int], *, to_float: bool = True,
              drawn: torch.Tensor | None = None) -> torch.Tensor | None:  # fmt: skip
        """uint8 pictures ``[B, C, H, W]`` through the pipeline as a batch, sample ``i`` drawing
        from ``seeds[i]`` exactly as :meth:`__call__` does under that seed (the same pictures), on
        the pictures' device; None when ``before`` has no batched form (see :meth:`plan`).
        ``to_float=False``: the uint8 pictures after ``before`` (with no ``after`` to follow).
        ``drawn``: the samples' draws made already (``[B, K]``, as :func:`.batched.raw_draws` makes
        them from ``seeds``; only with no ``after``, which would need the generators' states)."""
        plan = self.plan(*pictures.shape[-2:])
        if plan is None:
            return None
        from .batched import raw_draws

        if drawn is not None and not self.after:
            raw, states = drawn, None
        else:
            raw, states = raw_draws(plan, seeds, keep_states=bool(self.after))
        if not to_float:
            return plan(pictures, raw)
        out = self.to_float(plan(pictures, raw))
        if states:
            with SampleRandomness.kept():  # float transforms one at a time, each from where v2 left off
                for i, state in enumerate(states):
                    torch.default_generator.set_state(state)
                    picture = out[i]
                    for transform in self.after:
                        picture = transform(picture)
                    out[i] = picture
        return out


def make_pipeline(
    entries: Sequence[Any] | None,
    path: str,
    mean: Sequence[float] | None,
    std: Sequence[float] | None,
    batched: bool = True,
) -> tuple[ImagePipeline, list[float] | None, list[float] | None]:
    """The pipeline a config list describes, and the mean/std it normalises with (the list's own
    ``normalize`` when it names one, else the dataset's ``mean``/``std``); ``batched``: whether
    whole batches may be augmented at once (:meth:`ImagePipeline.batch`)."""
    built = build_transforms(entries, path)
    split = next((i for i, t in enumerate(built) if type(t).__name__ in FLOAT_TRANSFORMS), len(built))
    before, after = built[:split], built[split:]
    if after and type(after[0]).__name__ == "Normalize":
        mean, std = list(after[0].mean), list(after[0].std)
        after = after[1:]
    for i, transform in enumerate(after):
        if type(transform).__name__ == "Normalize":
            raise ConfigError("normalize may appear once, before random_erasing/gaussian_noise",
                              path=f"{path}.{split + 1 + i}")  # fmt: skip
    mean = None if mean is None else [float(v) for v in mean]
    std = None if std is None else [float(v) for v in std]
    if mean is not None and std is not None and len(mean) != len(std):
        raise ConfigError(f"normalize: mean has {len(mean)} values, std {len(std)}", path=path)
    if std is not None and any(v <= 0 for v in std):
        raise ConfigError(f"normalize: every std must be positive, got {std}", path=path)
    return ImagePipeline(before, mean, std, after, batched=batched, name=path), mean, std
