"""Knowledge distillation (``train.distill``): a student trained against a frozen teacher, for any
task whose model returns a ``loss`` (and ``logits`` for the logit term).

The step's loss is

    task_weight · (the student's own loss)
    + logit_weight · T² · KL(softmax(teacher logits / T) ‖ softmax(student logits / T))      (Hinton et al.)
    + Σ weight_i · MSE(adapter_i(student feature_i), teacher feature_i)                      (FitNets-style mimicking)

Features are the outputs of named modules (dotted paths in ``model.named_modules()``: a part such as
``backbone``, a stage such as ``backbone.layer3``, a neck such as ``neck`` — ``parts.`` may be left out),
read by forward hooks; a module that returns a list (an FPN's levels) is mimicked level by level, the
term being the levels' mean. Where the student's channels differ from the teacher's, a learned adapter
(a 1×1 convolution on ``[B, C, ...]`` maps, a linear layer on ``[B, ..., D]`` vectors) maps the student's
to the teacher's width; it trains with the student (in the optimizer's first parameter group, so the
learning-rate schedule covers it) and lives in the checkpoints, not in the model. Shapes are checked once, on a batch before training, with one clear
message naming both modules.

The teacher is frozen: eval mode, no gradients, never given to the optimizer; it runs eagerly (its
hooks must fire), the student by the run's engine (feature terms need the student's hooks too, so they
need ``eager``). Under several processes the adapters' gradients are averaged like the model's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from ..core.errors import ConfigError, ModforgeError
from ..engines.eager import Eager
from . import distributed
from .extension import RunExtension

if TYPE_CHECKING:  # pragma: no cover
    from .trainer import Trainer

__all__ = ["DistillSettings", "FeaturePair", "TeacherDistillation", "distillation_loss"]


@dataclasses.dataclass
class FeaturePair:
    """One mimicking term: the student module's output against the teacher module's."""

    student: str
    teacher: str
    weight: float = 1.0


@dataclasses.dataclass
class DistillSettings:
    """The settings of ``train.distill`` (what each means: :class:`modforge.experiment.distillation.Distillation`,
    whose arguments they are), checked on construction; ``features`` become :attr:`pairs`."""

    teacher: str
    temperature: float = 4.0
    logit_weight: float = 1.0
    task_weight: float = 1.0
    features: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        if self.temperature <= 0:
            raise ValueError(f"temperature must be positive, got {self.temperature}")
        if self.logit_weight < 0 or self.task_weight < 0:
            raise ValueError("logit_weight and task_weight must not be negative")
        pairs = []
        for i, spec in enumerate(self.features):
            if not isinstance(spec, dict) or set(spec) - {"student", "teacher", "weight"} or "student" not in spec:
                raise ValueError(f"features.{i}: expected {{student: MODULE, teacher: MODULE, weight: W}}, got {spec!r}")
            pair = FeaturePair(str(spec["student"]), str(spec.get("teacher", spec["student"])),
                               float(spec.get("weight", 1.0)))  # fmt: skip
            if pair.weight < 0:
                raise ValueError(f"features.{i}.weight must not be negative, got {pair.weight}")
            pairs.append(pair)
        self.pairs = pairs
        if not self.logit_weight and not any(p.weight for p in pairs):
            raise ValueError("nothing to distil: logit_weight is 0 and no feature term has a weight")


def distillation_loss(student: torch.Tensor, teacher: torch.Tensor, temperature: float) -> torch.Tensor:
    """``T² · KL(softmax(teacher / T) ‖ softmax(student / T))``, averaged over the batch (and over
    any positions beyond the class axis, which is the last one)."""
    classes = student.shape[-1]
    s = F.log_softmax(student.reshape(-1, classes).float() / temperature, dim=1)
    t = F.log_softmax(teacher.reshape(-1, classes).float() / temperature, dim=1)
    return F.kl_div(s, t, reduction="batchmean", log_target=True) * temperature**2


def _check_logits(student: Any, teacher: Any) -> None:
    """The logit term needs class scores of one shape from both models."""
    for who, out in (("student", student), ("teacher", teacher)):
        logits = out.get("logits") if isinstance(out, dict) else None
        if not isinstance(logits, torch.Tensor):
            what = "none" if logits is None else f"a {type(logits).__name__}"
            raise ConfigError(f"the logit term needs class logits (a tensor) from the {who}, whose 'logits' is {what} "
                              "(a detector's are per-level maps): set train.distill.logit_weight: 0 and distil "
                              "through train.distill.features (a detector's neck)",
                              path="train.distill.logit_weight")  # fmt: skip
    if student["logits"].shape[1:] != teacher["logits"].shape[1:]:
        raise ConfigError(f"the student's logits {list(student['logits'].shape)} and the teacher's "
                          f"{list(teacher['logits'].shape)} differ in shape: the logit term compares them class by "
                          "class", path="train.distill.logit_weight")  # fmt: skip


def _module(model: nn.Module, path: str, who: str) -> nn.Module:
    names = dict(model.named_modules())
    for candidate in (path, f"parts.{path}"):
        if candidate in names and candidate:
            return names[candidate]
    import difflib

    close = difflib.get_close_matches(path, [n for n in names if n], n=3)
    hint = f"; close: {', '.join(close)}" if close else ""
    raise ConfigError(f"the {who} has no module '{path}'{hint} (dotted paths of model.named_modules(), "
                      "'parts.' optional)", path="train.distill.features")  # fmt: skip


def _adapter(student: torch.Tensor, teacher: torch.Tensor, names: str) -> nn.Module | None:
    """What maps the student's feature to the teacher's shape: nothing, a 1×1 convolution
    (channel maps) or a linear layer (vectors and sequences); a clear error otherwise."""
    if student.shape == teacher.shape:
        return None
    if student.dim() == teacher.dim() >= 3 and student.shape[2:] == teacher.shape[2:] and student.dim() <= 5:
        conv = {3: nn.Conv1d, 4: nn.Conv2d, 5: nn.Conv3d}[student.dim()]
        return conv(student.shape[1], teacher.shape[1], kernel_size=1)
    if student.dim() == teacher.dim() and student.shape[:-1] == teacher.shape[:-1]:
        return nn.Linear(student.shape[-1], teacher.shape[-1])
    raise ConfigError(f"{names}: the student's feature {list(student.shape)} cannot be mapped to the teacher's "
                      f"{list(teacher.shape)} (only the channel width may differ)", path="train.distill.features")


class _Capture:
    """The outputs of some modules during one forward pass (forward hooks), each as its list of
    levels: one tensor, or every tensor of a list output (a feature pyramid)."""

    def __init__(self, modules: list[nn.Module]):
        self.outputs: list[list[torch.Tensor] | None] = [None] * len(modules)
        self.handles = [m.register_forward_hook(self._hook(i)) for i, m in enumerate(modules)]

    def _hook(self, i: int) -> Any:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            self.outputs[i] = _levels(output)

        return hook

    def take(self) -> list[list[torch.Tensor]]:
        taken, self.outputs = self.outputs, [None] * len(self.outputs)
        if any(not o for o in taken):
            raise ModforgeError("a distillation feature module did not run in this forward pass (or gave no tensor)")
        return taken  # type: ignore[return-value]


def _levels(output: Any) -> list[torch.Tensor]:
    """A module's output as feature levels: a tensor, the tensors of a list or tuple (an FPN's
    levels), or a dict's ``features``."""
    if isinstance(output, dict):
        output = output.get("features", next(iter(output.values()), None))
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, (list, tuple)):
        return [o for o in output if isinstance(o, torch.Tensor)]
    return []


def _key(pair: int, level: int, levels: int) -> str:
    """The adapter's name: the pair's index, and the level's when the feature has several."""
    return str(pair) if levels == 1 else f"{pair}_{level}"


class TeacherDistillation(RunExtension):
    """The distillation terms of a student's training step against a frozen teacher (module doc).

    The registered ``distill`` extension (:class:`modforge.experiment.distillation.Distillation`, whose
    arguments these are) builds the teacher from ``teacher`` and hands it over (:meth:`attach_teacher`);
    on its own this class distils from a teacher module given directly.
    """

    standard_step_reason = "train.distill trains a model against a teacher in the standard run"

    def __init__(self, teacher: str, temperature: float = 4.0, logit_weight: float = 1.0, task_weight: float = 1.0,
                 features: list[dict[str, Any]] | None = None):  # fmt: skip
        self.distill = DistillSettings(teacher, temperature, logit_weight, task_weight, list(features or []))
        self.teacher: nn.Module | None = None
        self.teacher_fingerprint = ""
        self.adapters = nn.ModuleDict()

    def attach_teacher(self, trainer: Trainer, teacher: nn.Module, example: dict[str, Any],
                       fingerprint: str = "") -> None:  # fmt: skip
        """Freeze ``teacher`` on the trainer's device, hook both models' feature modules and size the
        adapters on ``example`` (a batch not trained on). ``fingerprint``: what the teacher was built
        from (a checkpoint's SHA-256), kept in the checkpoints: a run resumes only with the same teacher."""
        self.teacher_fingerprint = fingerprint
        self.teacher = teacher.to(trainer.device).eval()
        for p in self.teacher.parameters():
            p.requires_grad_(False)
        pairs = self.distill.pairs
        if pairs and not isinstance(trainer.engine, Eager):
            raise ConfigError(f"train.distill.features read the student's modules through hooks, which the "
                              f"'{trainer.engine.name}' engine does not run; train with engine eager (or use only "
                              "logit_weight)", path="train.engine")  # fmt: skip
        self._student = _Capture([_module(trainer.model, p.student, "student") for p in pairs])
        self._teacher = _Capture([_module(self.teacher, p.teacher, "teacher") for p in pairs])
        if pairs or self.distill.logit_weight:
            self._probe(trainer, trainer.prepare_batch(example))

    def _probe(self, trainer: Trainer, example: dict[str, Any]) -> None:
        """One forward pass of both models on ``example`` before training: the logit term's
        inputs checked, the adapters sized (one clear error naming the setting otherwise)."""
        model = trainer.model
        was = model.training
        model.eval()
        try:
            with torch.no_grad():
                ours, theirs = model(example), self.teacher(example)
        finally:
            model.train(was)
        if self.distill.logit_weight:
            _check_logits(ours, theirs)
        if self.distill.pairs:
            self._size_adapters(trainer)

    def _size_adapters(self, trainer: Trainer) -> None:
        for i, (student, teacher) in enumerate(zip(self._student.take(), self._teacher.take(), strict=True)):
            pair = self.distill.pairs[i]
            names = f"train.distill.features.{i} ({pair.student} → {pair.teacher})"
            if len(student) != len(teacher):
                raise ConfigError(f"{names}: the student gives {len(student)} feature levels, the teacher "
                                  f"{len(teacher)}", path="train.distill.features")  # fmt: skip
            for j, (s, t) in enumerate(zip(student, teacher, strict=True)):
                adapter = _adapter(s, t, names if len(student) == 1 else f"{names}, level {j}")
                if adapter is not None:
                    self.adapters[_key(i, j, len(student))] = adapter.to(trainer.device)
        if len(self.adapters):  # into the first group: a schedule built for the optimizer's groups still fits
            distributed.broadcast_module(self.adapters, what="sharing the distillation adapters")  # one start
            trainer.optimizer.param_groups[0]["params"].extend(self.adapters.parameters())

    def loss(self, trainer: Trainer, batch: Any, out: dict[str, Any],
             loss: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:  # fmt: skip
        with torch.no_grad():
            teacher_out = self.teacher(batch)
        terms: dict[str, torch.Tensor] = {}
        loss = self.distill.task_weight * loss
        if self.distill.logit_weight:  # both models' logits checked before training (_probe)
            terms["distill_logit_loss"] = distillation_loss(out["logits"], teacher_out["logits"],
                                                            self.distill.temperature)  # fmt: skip
            loss = loss + self.distill.logit_weight * terms["distill_logit_loss"]
        if self.distill.pairs:
            feature = torch.zeros((), device=loss.device)
            students, teachers = self._student.take(), self._teacher.take()
            for i, (pair, student, teacher) in enumerate(zip(self.distill.pairs, students, teachers, strict=True)):
                levels = len(student)
                for j, (s, t) in enumerate(zip(student, teacher, strict=True)):  # the levels' mean
                    key = _key(i, j, levels)
                    mapped = self.adapters[key](s) if key in self.adapters else s
                    feature = feature + pair.weight * F.mse_loss(mapped.float(), t.float()) / levels
            terms["distill_feature_loss"] = feature
            loss = loss + feature
        return loss, terms

    def before_optimizer_step(self, trainer: Trainer) -> None:
        if trainer.world_size > 1 and len(self.adapters):  # outside DDP: averaged here, as DDP averages the model's
            distributed.average_gradients(list(self.adapters.parameters()), "averaging the distillation adapters")

    def checkpoint_entries(self) -> dict[str, Any]:
        return {"distill_adapters": self.adapters.state_dict(), "distill_teacher": self.teacher_fingerprint}

    def restore(self, payload: Mapping[str, Any]) -> None:
        saved_teacher = payload.get("distill_teacher")
        if saved_teacher and self.teacher_fingerprint and saved_teacher != self.teacher_fingerprint:
            raise ModforgeError("the teacher changed since this checkpoint was written (its file's SHA-256 differs): "
                                "a distilled run resumes only with the teacher it was trained against")  # fmt: skip
        saved = payload.get("distill_adapters")
        if saved is not None:
            self.adapters.load_state_dict(saved)
