"""The run-extension contract: a feature of a run (``train.<name>``) that the loop does not know.

A *run extension* is a callback with a few more hooks. Where a callback only watches the loop
(log, checkpoint, stop early), an extension changes what the run trains or evaluates:

============================== ==========================================================================
hook                           what it may do (the trainer calls it; an extension overrides what it needs)
============================== ==========================================================================
``prepare_model(model, x)``    change the model once it is built and its ``model.init`` weights loaded,
                               before a checkpoint's weights go in (QAT prepares fake quantization)
``setup(trainer, context)``    once the trainer exists, before training: build state, add parameters to
                               the optimizer (distillation adapters), keep a copy of the weights (EMA)
``loss(trainer, batch, out,    add terms to a training step's loss; the named terms are logged as
loss)``                        ``train_<term>`` columns (distillation)
``before_optimizer_step``      gradients are ready, not yet applied (average an extension's own
                               parameters' gradients across processes)
``after_optimizer_step``       right after the optimizer step, before the scheduler and the step
                               callbacks (EMA's update)
``on_train_epoch_end``         the epoch's training batches are done, its validation is next (a
                               stochastic weight average takes the epoch's weights)
``evaluation_weights``         a context in which validation, ``best.pt`` selection and the test run
                               (EMA swaps its average in); ``modforge test``, ``export`` and
                               ``predict`` then use the ``average`` of its checkpoint entry
``set_training(model, on)``    the model enters training or evaluation (QAT's observers record or freeze);
                               also called with ``False`` before a trained model is tested or exported
``checkpoint_entries`` /       what every checkpoint holds of it, resumed exactly (default: its
``restore``                    ``state_dict()`` under its name)
every :class:`Callback` hook   ``on_fit_start``, ``on_epoch_start``, ``on_step_end``, ``on_epoch_end``,
                               ``on_fit_end``, ``on_run_end``
============================== ==========================================================================

Order. Extensions run in their ``order`` (lower first), among themselves and among the callbacks
at the callback hooks; at a tie, in the order their sections are configured.

Refusals are *declared*, never written per pair: ``conflicts`` (extension name → why the two
cannot run together), ``engines`` (the engines it works with, and ``engine_reason``) and a
:meth:`loss` hook (an extension that adds loss terms needs the standard training step: a trainer
that replaces :meth:`~modforge.train.trainer.Trainer.training_step` — a continual method,
``train.trainer`` — is refused with ``standard_step_reason``). :func:`refusal` turns the
declarations into one message; the config check and the trainer both ask it.

An extension is configured under ``train.<name>`` with its constructor's arguments
(``train.ema: {decay: 0.99}``), validated like every registered part's (CLI flags, ``modforge
describe extension ema``), and built once per run (:func:`build_extensions`): the constructor
takes settings only — work that needs the model or the data belongs in :meth:`prepare_model`
and :meth:`setup`.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn

from ..core.errors import ConfigValueError
from ..core.registries import EXTENSIONS
from .callbacks.base import Callback

if TYPE_CHECKING:  # pragma: no cover
    from .trainer import Trainer

__all__ = ["RunContext", "RunExtension", "build_extensions", "check_extension", "extension_names", "refusal", "registered_name"]


@dataclasses.dataclass
class RunContext:
    """What the run lends its extensions at :meth:`RunExtension.setup` (the runner fills it; a
    trainer used on its own has none).

    Args:
        config: the run's :class:`~modforge.core.config.Config`.
        splits: its data splits (a teacher is built on the student's data).
        train_loader: the training loader (a batch to size things with).
        resume: the checkpoint the run continues from, or None.
    """

    config: Any = None
    splits: Any = None
    train_loader: Any = None
    resume: Mapping[str, Any] | None = None


class RunExtension(Callback):
    """A feature of a run configured under ``train.<name>`` (module doc: the hooks and the order).

    Class attributes an extension sets:
        conflicts: other extensions' names → why this one cannot run with them.
        engines: the engines it can train with (None: any); ``engine_reason`` says why.
        standard_step_reason: why it needs the standard training step (said when a trainer that
            replaces the step is configured; only asked of extensions with a :meth:`loss` hook).
        evaluated_as: how the weights :meth:`evaluation_weights` swaps in are named in a run's
            summary (``"their average"``); "" when it swaps none.
        trained_weights_setting: the setting of this extension that leaves evaluation to the trained
            weights (``"evaluate: false"``), named when swapped weights are refused.
        export_tolerance: how far (relative to the outputs' scale) an exported artifact may differ
            from the model this extension trained (0: the export's own tolerance).
        half_weights_reason: why it cannot train weights stored in 16 bits (``precision:
            "16-true"``/``"bf16-true"``); "" when it can.
    """

    conflicts: ClassVar[Mapping[str, str]] = {}
    engines: ClassVar[tuple[str, ...] | None] = None
    engine_reason: ClassVar[str] = ""
    standard_step_reason: ClassVar[str] = "it adds terms to the loss of the standard training step"
    evaluated_as: str = ""
    trained_weights_setting: ClassVar[str] = ""
    export_tolerance: ClassVar[float] = 0.0
    half_weights_reason: ClassVar[str] = ""
    name: str = ""  # the registered name (its config key under train:), set by build_extensions

    # ------------------------------------------------------------------ build
    def prepare_model(self, model: nn.Module, example: torch.Tensor | None) -> None:
        """Change the built model in place (``example``: a zero batch of its input shape, or None)."""

    def setup(self, trainer: Trainer, context: RunContext | None) -> None:
        """The trainer exists (model on its device, optimizer built); training has not started."""

    # ------------------------------------------------------------------- step
    def loss(self, trainer: Trainer, batch: Any, out: dict[str, Any],
             loss: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:  # fmt: skip
        """The training step's loss with this extension's terms, and the named terms to log."""
        return loss, {}

    def before_optimizer_step(self, trainer: Trainer) -> None:
        """The step's gradients are ready and not yet applied."""

    def after_optimizer_step(self, trainer: Trainer) -> None:
        """The optimizer just stepped (before the scheduler and the step callbacks)."""

    def on_train_epoch_end(self, trainer: Trainer) -> None:
        """The epoch's training batches are done; its validation is next."""

    # ------------------------------------------------------------- evaluation
    def evaluation_weights(self, trainer: Trainer) -> contextlib.AbstractContextManager[None] | None:
        """A context with the weights evaluation should use in the model; None: the trained ones.
        An extension that swaps weights in keeps them in its checkpoint entry as
        ``{name: {"average": state_dict, ...}}``: ``modforge test``, ``export`` and ``predict`` of
        its checkpoints evaluate them (:func:`~modforge.model.formats.inference_weights`)."""
        return None

    def set_training(self, model: nn.Module, training: bool) -> None:
        """The model enters training (``True``) or evaluation."""

    # ------------------------------------------------------------ checkpoints
    def checkpoint_entries(self) -> dict[str, Any]:
        """Top-level checkpoint entries of this extension: keys ``<name>`` or ``<name>_…`` only."""
        state = self.state_dict()
        return {self.name: state} if state else {}

    def restore(self, payload: Mapping[str, Any]) -> None:
        """Continue from a checkpoint (what :meth:`checkpoint_entries` wrote, when it is there)."""
        state = payload.get(self.name)
        if state is not None:
            self.load_state_dict(state)

    # -------------------------------------------------------------- helpers
    @classmethod
    def adds_loss(cls) -> bool:
        return cls.loss is not RunExtension.loss


def refusal(extensions: Iterable[type[RunExtension] | RunExtension], *, names: Iterable[str] = (),
            engine: str | None = None, trainer_class: type | None = None,
            precision: str | None = None) -> tuple[str, str] | None:  # fmt: skip
    """Why these extensions cannot run as configured, and the config key to blame — or None.

    ``names`` are the extensions' config names (defaults: their ``name``); ``engine`` the training
    engine's name; ``trainer_class`` the Trainer class that runs the steps (checked when given);
    ``precision`` the run's ``train.precision`` (checked when given).
    """
    classes = [e if isinstance(e, type) else type(e) for e in extensions]
    named = list(names) or [getattr(e, "name", "") for e in extensions]
    present = set(named)
    for name, cls in zip(named, classes, strict=True):
        for other, why in cls.conflicts.items():
            if other in present:
                return f"train.{name} cannot be combined with train.{other}: {why}", f"train.{name}"
        if engine is not None and cls.engines is not None and engine not in cls.engines:
            allowed = " or ".join(cls.engines)
            why = f": {cls.engine_reason}" if cls.engine_reason else ""
            return f"train.{name} trains with the {allowed} engine, not '{engine}'{why}", f"train.{name}"
        if precision is not None and precision.endswith("-true") and cls.half_weights_reason:
            return (f"train.{name} cannot train with precision {precision!r} (weights stored in 16 bits): "
                    f"{cls.half_weights_reason}; use precision '{precision.removesuffix('-true')}' (mixed)"), f"train.{name}"
        if trainer_class is not None and cls.adds_loss() and not getattr(trainer_class.training_step, "standard", False):
            return (f"train.{name} needs the standard training step ({cls.standard_step_reason}); this run's trainer "
                    f"{trainer_class.__name__} replaces it (a continual method or train.trainer)"), f"train.{name}"
    return None


def registered_name(extension: RunExtension) -> str:
    """The name ``extension``'s class is registered under (its config key), else its class name in
    lower case (an extension built directly, never registered)."""
    cls = type(extension)
    return next((entry.name for entry in EXTENSIONS.entries() if entry.obj is cls), cls.__name__.lower())


def extension_names(section: Mapping[str, Any]) -> list[str]:
    """The keys of a ``train:`` section that name registered extensions (built-in or a plug-in's)."""
    return [key for key in section if key in EXTENSIONS]


def check_extension(name: str, value: Any, origin_of: Callable[[str], str | None]) -> dict[str, Any]:
    """``train.<name>`` checked by the extension's signature, then by its constructor (its ranges and
    combinations of its own settings): one error naming the section either way. Returns the
    arguments, coerced."""
    path = f"train.{name}"
    cls, signature = EXTENSIONS.resolve(name, path=path, source=origin_of(path))
    args = signature.validate({} if value is True else value, path=path, origin_of=origin_of, plain=True)
    _construct(cls, args, path, origin_of)
    return args


def _construct(cls: type[RunExtension], args: Mapping[str, Any], path: str,
               origin_of: Callable[[str], str | None]) -> RunExtension:  # fmt: skip
    try:
        return cls(**args)
    except ValueError as exc:
        raise ConfigValueError(str(exc), path=path, source=origin_of(path)) from None


def build_extensions(sections: Mapping[str, Any],
                     origin_of: Callable[[str], str | None] = lambda _path: None) -> list[RunExtension]:  # fmt: skip
    """The extensions configured under ``train:`` (``{name: args}``, as validated), built in their
    ``order`` (a stable sort: ties keep the configured order)."""
    built = []
    for name, args in sections.items():
        cls, _signature = EXTENSIONS.resolve(name, path=f"train.{name}")
        extension = _construct(cls, dict(args or {}), f"train.{name}", origin_of)
        extension.name = name
        built.append(extension)
    return sorted(built, key=lambda e: e.order)
