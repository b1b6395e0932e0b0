"""Composing augmentations: a :class:`Step` (an augmentation applied with probability ``p``), a
:class:`Pipeline` of steps, ``one_of`` (one of several, picked at random), and :func:`build_augmentations`,
which turns a config's list of ``{type, args, p}`` specs into a pipeline with errors located at the step."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ...core.coercion import coerce
from ...core.errors import ConfigError, ConfigValueError
from ...core.registries import AUGMENTATIONS, register_augmentation
from .augment_base import Augmentation, as_waveform, check_rng

__all__ = ["OneOf", "Pipeline", "Step", "build_augmentations"]


@dataclasses.dataclass(frozen=True)
class Step:
    """One pipeline step: an augmentation applied with probability ``p``.

    Attributes:
        augment: any ``(wave, rng) -> wave`` callable.
        p: probability of applying it, in [0, 1].
        name: for messages and ``repr`` (the spec's ``type``).
    """

    augment: Callable[[np.ndarray, np.random.Generator], np.ndarray]
    p: float = 1.0
    name: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.p, bool) or not 0.0 <= float(self.p) <= 1.0:
            raise ValueError(f"p (probability of applying {self.name or 'the step'}) must be in [0, 1], got {self.p!r}")

    def __call__(self, wave: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Draw one uniform number from ``rng``; apply the augmentation iff it is below ``p``."""
        if rng.random() < self.p:
            return as_waveform(self.augment(wave, rng))
        return as_waveform(wave)


class Pipeline:
    """Steps applied in order to one waveform; an empty pipeline returns its input.

    Each step first draws one uniform number from ``rng`` and is applied when it is below
    ``p`` (so ``p = 0`` never applies, ``p = 1`` always does); an applied step's augmentation
    then draws what it needs from the same ``rng``.

    Args:
        steps: :class:`Step` objects (bare callables are wrapped with ``p = 1``).
    """

    def __init__(self, steps: Iterable[Step | Callable[..., np.ndarray]] = ()):
        self.steps: tuple[Step, ...] = tuple(
            s if isinstance(s, Step) else Step(s, 1.0, type(s).__name__) for s in steps
        )

    def __call__(self, wave: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        x = as_waveform(wave)
        check_rng(rng)
        for step in self.steps:
            x = step(x, rng)
        return x

    @property
    def changes_length(self) -> bool:
        """True when some step may change the length (``random_crop``)."""
        return any(getattr(s.augment, "changes_length", False) for s in self.steps)

    def __len__(self) -> int:
        return len(self.steps)

    def __iter__(self) -> Iterator[Step]:
        return iter(self.steps)

    def __bool__(self) -> bool:
        return bool(self.steps)

    def __repr__(self) -> str:
        inner = ", ".join(f"{s.name or type(s.augment).__name__}(p={s.p:g})" for s in self.steps)
        return f"Pipeline([{inner}])"


_RELATIVE = "_modforge_relative_to_step"  # marks an error whose path is relative to the step being built


@register_augmentation("one_of")
class OneOf(Augmentation):
    """Apply exactly one of several augmentations, picked at random (by ``weights``).

    The picked choice's own ``p`` still applies, so ``one_of`` with ``p`` on the choices can
    also apply nothing.

    Args:
        choices: augmentation specs, each ``{type, args, p}`` like a pipeline step.
        weights: relative chance of each choice (default: equal).
        sample_rate: sampling rate in Hz (wired by the builder, handed to the choices).
    """

    def __init__(self, choices: list[Any], weights: list[float] | None = None, sample_rate: int = 16000):
        try:
            pipeline = build_augmentations(choices, sample_rate, path="args.choices")
        except ConfigError as exc:
            setattr(exc, _RELATIVE, True)  # build_augmentations puts it under this step's path
            raise
        if not pipeline.steps:
            raise ValueError("one_of needs at least one choice")
        if weights is None:
            weights = [1.0] * len(pipeline.steps)
        if len(weights) != len(pipeline.steps):
            raise ValueError(f"weights has {len(weights)} entries for {len(pipeline.steps)} choices")
        if any(w < 0 or not math.isfinite(w) for w in weights) or sum(weights) <= 0:
            raise ValueError(f"weights must be finite, >= 0 and not all 0, got {weights}")
        self.steps = pipeline.steps
        self.weights = [float(w) for w in weights]
        self.sample_rate = sample_rate
        self._probabilities = np.asarray(self.weights) / sum(self.weights)
        self.changes_length = any(getattr(s.augment, "changes_length", False) for s in self.steps)

    def apply(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        index = int(rng.choice(len(self.steps), p=self._probabilities))
        return self.steps[index](x, rng)


def _relocate(exc: ConfigError, prefix: str) -> None:
    """Put an error raised while building ``one_of``'s choices under the step's own path."""
    if getattr(exc, _RELATIVE, False):
        setattr(exc, _RELATIVE, False)
        exc.path = f"{prefix}.{exc.path}" if exc.path else prefix
        exc.args = (str(exc),)


def build_augmentations(
    specs: Sequence[Any] | None,
    sample_rate: int,
    path: str = "data.augment",
    *,
    origin_of: Callable[[str], str | None] | None = None,
    allowed_modules: Iterable[str] = (),
    base_dir: str | None = None,
) -> Pipeline:
    """Build a :class:`Pipeline` from a list of specs ``{type, args, p}`` (or bare names).

    Args:
        specs: the steps, in order; ``None`` or ``[]`` gives an empty pipeline.
        sample_rate: handed to every augmentation that takes ``sample_rate``.
        path: config path of the list, for messages (steps are ``path.0``, ``path.1``...).
        origin_of: maps a config path to the file/override it came from.
        allowed_modules: plug-in modules whose objects a ``type`` may name by import path.
        base_dir: folder that relative plug-in paths are resolved against.

    Raises:
        ConfigError: not a list, an unknown ``type``, a bad argument, or ``p`` outside [0, 1],
            located at the step's path (``data.augment.1.p``).
    """
    where = origin_of or (lambda _p: None)
    if specs is None:
        return Pipeline()
    if isinstance(specs, (str, Mapping)) or not isinstance(specs, Sequence):
        raise ConfigValueError(
            f"expected a list of augmentation steps ({{type: NAME, args: {{...}}, p: 0.5}}), got {specs!r}",
            path=path,
            source=where(path),
        )
    steps = []
    for i, spec in enumerate(specs):
        item = f"{path}.{i}"
        p = 1.0
        if isinstance(spec, Mapping) and "p" in spec:
            try:
                p = coerce(spec["p"], float)
            except ConfigError as exc:
                raise exc.located(path=f"{item}.p", source=where(f"{item}.p")) from None
            if not 0.0 <= p <= 1.0:
                raise ConfigValueError(
                    f"p is the probability of applying the step and must be in [0, 1], got {spec['p']!r}",
                    path=f"{item}.p",
                    source=where(f"{item}.p"),
                )
        try:
            augment = AUGMENTATIONS.build(
                spec,
                path=item,
                extras=("p",),
                origin_of=origin_of,
                allowed_modules=allowed_modules,
                base_dir=base_dir,
                sample_rate=sample_rate,
            )
        except ConfigError as exc:
            _relocate(exc, item)
            raise
        name = spec if isinstance(spec, str) else str(spec["type"])  # build() accepted it: a name or a mapping
        steps.append(Step(augment, p, name.strip()))
    return Pipeline(steps)
