"""An exponential moving average of the weights (``train.ema``) — what timm's ``ModelEmaV3``,
mmengine's ``EMAHook`` and Lightning's weight averaging keep beside the trained weights.

After every ``every``-th optimizer step the average moves towards the weights:
``average ← decay · average + (1 − decay) · weights`` (one fused ``lerp`` over the parameters).
Buffers — BatchNorm's running statistics — are copied from the model, as mmengine does by default:
statistics averaged along the trajectory do not describe the averaged weights' activations (measured:
an LCNN whose trained weights have 0 % validation EER scored 34 % with averaged statistics and 0 %
with the current ones). ``average_buffers`` averages the floating buffers too (timm's way). For the first ``warmup_steps`` optimizer steps the average
simply follows the weights (mmengine's ``begin_iter``): early weights, far from any minimum,
would otherwise weigh on it for thousands of steps. With ``ramp`` (the default) the decay itself grows with the
number of averaging updates *n*, as TensorFlow's ``ExponentialMovingAverage(num_updates=…)`` does:
``min(decay, (1 + n) / (10 + n))`` — 0.1 at the first update, 0.5 at the eighth, 0.9 at the 81st — so a
short run's average is made of its trained weights and not mostly of the initial ones (at a fixed
0.999, 300 updates leave 74 % of the initial weights in the average). An average that has seen fewer
updates than its horizon (``1 / (1 − decay)``) is *young*: the run says so once, when it is first
evaluated, and again at the end of training if it still is, naming the setting that fits the run.

With ``evaluate`` on (the default) validation, ``best.pt`` selection, the end-of-run test,
``modforge test``, ``export`` and ``predict`` use the average: the trainer swaps it into the
model for each evaluation and back after, so every engine evaluates it, and checkpoints carry it
as ``ema`` beside ``model`` (the trained weights, which training resumes from;
:func:`modforge.model.formats.inference_weights` picks what is evaluated). The average's
state is part of every checkpoint, so a resumed run continues it bitwise; under several
processes the weights are equal after every step, and so is every process's average.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ..core.errors import ModforgeError
from ..core.registries import register_extension
from . import distributed
from .extension import RunContext, RunExtension

if TYPE_CHECKING:  # pragma: no cover
    from .trainer import Trainer

__all__ = ["EmaSettings", "ExponentialMovingAverage", "WeightAverage"]

log = logging.getLogger("modforge.train")


@dataclasses.dataclass
class EmaSettings:
    """The settings of ``train.ema`` (what each means: :class:`ExponentialMovingAverage`, whose
    arguments they are), checked on construction."""

    decay: float = 0.999
    warmup_steps: int = 0
    every: int = 1
    evaluate: bool = True
    average_buffers: bool = False
    ramp: bool = True

    def __post_init__(self) -> None:
        if not 0.0 < self.decay < 1.0:
            raise ValueError(f"decay must lie strictly between 0 and 1, got {self.decay}")
        if self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must not be negative, got {self.warmup_steps}")
        if self.every < 1:
            raise ValueError(f"every must be at least 1 (optimizer steps), got {self.every}")


class WeightAverage:
    """The moving average of ``model``'s state (parameters and buffers), by state-dict name.

    Args:
        model: the model whose weights are averaged (its tensors are read at each update).
        settings: decay, warm-up and period.
    """

    def __init__(self, model: nn.Module, settings: EmaSettings):
        self.settings = settings
        self.model = model
        state = model.state_dict()
        # 16-bit weights (precision '16-true'/'bf16-true') are averaged in float32: an update of (1 - decay)
        # times the difference moves a 16-bit number by less than its spacing
        self.average: dict[str, torch.Tensor] = {
            name: value.detach().clone().float() if value.dtype in (torch.float16, torch.bfloat16) else value.detach().clone()
            for name, value in state.items()
        }
        self.updates = 0  # optimizer steps seen (the average's own counter, checkpointed)
        self._parameter_names = frozenset(name for name, _ in model.named_parameters())  # once: not every step

    def _pairs(self) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
        """(averaged entries, their current values, copied entries, their current values) in state
        order: parameters are averaged, buffers copied (floating ones averaged with ``average_buffers``)."""
        state = self.model.state_dict()
        if state.keys() != self.average.keys():
            raise ValueError("the model's state changed names since the average was made")
        parameters = self._parameter_names
        floats, float_src, others, other_src = [], [], [], []
        for name, avg in self.average.items():
            value = state[name].detach()
            averaged = name in parameters or self.settings.average_buffers
            if avg.is_floating_point() and averaged:
                floats.append(avg)
                float_src.append(value)
            else:
                others.append(avg)
                other_src.append(value)
        return floats, float_src, others, other_src

    @torch.no_grad()
    def step(self) -> None:
        """Called after each optimizer step: move the average (every ``every`` steps; the
        weights themselves during the warm-up)."""
        self.updates += 1
        if self.updates % self.settings.every:
            return
        floats, float_src, others, other_src = self._pairs()
        if self.updates <= self.settings.warmup_steps:
            torch._foreach_copy_(floats, float_src)
        else:
            sources = [s.to(a.dtype) if s.dtype != a.dtype else s for a, s in zip(floats, float_src, strict=True)]
            torch._foreach_lerp_(floats, sources, 1.0 - self.decay_now())
        for avg, value in zip(others, other_src, strict=True):
            avg.copy_(value)

    def averaged_updates(self) -> int:
        """Updates that moved the average (after the warm-up, every ``every``-th step)."""
        moving = max(0, self.updates - self.settings.warmup_steps)
        return moving // self.settings.every

    def decay_now(self) -> float:
        """The decay of the current update (the ramped one with ``ramp``)."""
        n = self.averaged_updates()
        if not self.settings.ramp:
            return self.settings.decay
        return min(self.settings.decay, (1 + n) / (10 + n))

    def youth(self, planned_steps: int | None = None) -> str | None:
        """A sentence saying the average is young — it has seen fewer updates than its horizon
        ``1 / (1 − decay)`` — or None. With ``ramp`` off, how much of the initial weights it still
        holds. ``planned_steps``: the run's optimizer steps, for the decay the sentence suggests
        (a horizon of a third of the run's averaging updates)."""
        horizon = 1.0 / (1.0 - self.settings.decay)
        n = self.averaged_updates()
        if n >= horizon:
            return None
        held = (f"; without the ramp (train.ema.ramp=false) {self.settings.decay ** n:.0%} of it is still the "
                "initial weights" if not self.settings.ramp else "")  # fmt: skip
        total = n
        if planned_steps is not None:
            total = max(n, (planned_steps - self.settings.warmup_steps) // self.settings.every)
        fitting = 1.0 - 1.0 / max(2.0, total / 3)
        return (f"the weight average (train.ema) is young: {n} averaging update(s), fewer than the ~{horizon:.0f} its "
                f"decay {self.settings.decay:g} averages over{held}. For a run this short set train.ema.decay "
                f"to about {fitting:.2g} (a horizon of a third of the run)")  # fmt: skip

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        """The average in the model's own tensors for the duration (every engine's runnable
        sees it), the trained weights back after."""
        state = self.model.state_dict()
        kept = {name: value.detach().clone() for name, value in state.items()}
        with torch.no_grad():
            for name, value in state.items():
                value.copy_(self.average[name])
        try:
            yield
        finally:
            with torch.no_grad():
                for name, value in state.items():
                    value.copy_(kept[name])

    def state_dict(self) -> dict[str, Any]:
        return {"average": {k: v.detach().clone() for k, v in self.average.items()}, "updates": self.updates}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        average = state["average"]
        if average.keys() != self.average.keys():
            missing = sorted(set(self.average) - set(average))[:3]
            extra = sorted(set(average) - set(self.average))[:3]
            raise ValueError(f"the checkpoint's weight average does not fit this model (missing {missing}, "
                             f"unexpected {extra})")  # fmt: skip
        with torch.no_grad():
            for name, value in average.items():
                self.average[name].copy_(value)
        self.updates = int(state["updates"])


@register_extension("ema")
class ExponentialMovingAverage(RunExtension):
    """An exponential moving average of the weights, kept beside them and (``evaluate``) validated,
    tested, exported and predicted with (module doc).

    Args:
        decay: how much of the average each update keeps (0 < decay < 1; 0.999 averages over
            roughly the last thousand updates).
        warmup_steps: optimizer steps during which the average equals the weights.
        every: update the average every N optimizer steps.
        evaluate: validate, select ``best.pt``, test, export and predict with the average;
            False: the average is only kept (in every checkpoint's ``ema``).
        average_buffers: average the floating buffers (BatchNorm statistics) too; False: copy
            them from the model at each update.
        ramp: grow the decay with the number of updates, ``min(decay, (1 + n) / (10 + n))``
            (TensorFlow's num-updates rule); False: ``decay`` from the first update.
    """

    trained_weights_setting = "evaluate: false"
    order = 1  # at the end of training it says whether the average is young before the other callbacks speak

    def __init__(self, decay: float = 0.999, warmup_steps: int = 0, every: int = 1, evaluate: bool = True,
                 average_buffers: bool = False, ramp: bool = True):  # fmt: skip
        self.settings = EmaSettings(decay, warmup_steps, every, evaluate, average_buffers, ramp)
        self.evaluated_as = "their average" if evaluate else ""
        self.average: WeightAverage | None = None
        self._young_said = False  # the young-average warning at the first evaluation: once
        self._planned: int | None = None

    def setup(self, trainer: Trainer, context: RunContext | None) -> None:
        self.average = WeightAverage(trainer.model, self.settings)

    def after_optimizer_step(self, trainer: Trainer) -> None:
        self.average.step()

    def evaluation_weights(self, trainer: Trainer) -> contextlib.AbstractContextManager[None] | None:
        if not self.settings.evaluate:
            return None
        self._say_if_young(trainer, first=True)
        return self.average.applied()

    def on_fit_end(self, trainer: Trainer) -> None:
        self._say_if_young(trainer, first=False)

    def _say_if_young(self, trainer: Trainer, *, first: bool) -> None:
        """Warn that the evaluated average is young: at its first evaluation, and at the end of
        training when it still is (the average tested and exported)."""
        if (first and self._young_said) or not self.settings.evaluate:
            return
        youth = self.average.youth(trainer.planned_steps or None)
        if youth is not None and distributed.is_main_process():
            log.warning("%s%s", youth, "" if first else " — the run ends with it: it is what is tested and exported")
        self._young_said = True

    def checkpoint_entries(self) -> dict[str, Any]:
        return {"ema": {**self.average.state_dict(), "evaluate": self.settings.evaluate}}

    def restore(self, payload: Mapping[str, Any]) -> None:
        """The checkpoint's average; a checkpoint without one (trained before ``train.ema`` was
        set) starts the average from its weights, with a warning."""
        saved = payload.get("ema")
        if saved is None:
            log.warning("the checkpoint has no weight average (train.ema was not set when it was saved): "
                        "the average starts from its weights")  # fmt: skip
            self.average = WeightAverage(self.average.model, self.settings)
            return
        try:
            self.average.load_state_dict(saved)
        except ValueError as exc:
            raise ModforgeError(f"the checkpoint being resumed: {exc}") from None
