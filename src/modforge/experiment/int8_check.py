"""The int8 graph an export writes is checked, not assumed: each candidate setting (calibration
method, per-channel weights, float ends) is quantized and scored against the fp32 graph on the
validation split (else the training split), with the task's own metric — top-1 accuracy, or a
detector's COCO mAP — and the loss is counted in points (100 × the metric's drop).

``--calibration auto`` (the default) tries :data:`AUTO_ORDER` in turn and keeps the first setting
that loses at most ``max_loss`` points; a named method is tried alone. When the kept graph still
loses more, the export refuses in one line that gives the measured loss and the option that helps
(measured: another setting within the limit, when one exists) — an int8 artifact is used in place
of the fp32 one, so a silently worse file is the failure worth stopping. ``--max-loss`` raises the
limit for a user who accepts the loss; the artifact's metadata records it either way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ..engines.base import EngineError
from ..engines.onnx_runtime import OnnxRunner
from ..engines.quantize import CALIBRATION_METHODS, FLOAT_ENDS, quantize_onnx

__all__ = ["AUTO_ORDER", "Candidate", "Checked", "Int8Options", "choose_int8"]

AUTO_ORDER: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("minmax", ()),
    ("entropy", ()),
    ("percentile", ()),
    ("minmax", FLOAT_ENDS),
    ("entropy", FLOAT_ENDS),
)
"""``--calibration auto``: (method, float ends) in the order tried — the fastest graphs first
(every method gives the same operators; float ends cost a little speed)."""


@dataclasses.dataclass(frozen=True)
class Int8Options:
    """How ``modforge export --quantize`` makes and checks its int8 graph (the CLI's flags)."""

    calibration: str = "auto"
    """``auto`` or one of :data:`~modforge.engines.quantize.CALIBRATION_METHODS`."""
    per_channel: bool = True
    """Weights quantized per output channel (else one scale per tensor)."""
    float_ends: tuple[str, ...] | None = None
    """Matrix layers kept in float32 (``first``, ``last``); None: none, or as ``auto`` finds."""
    calibration_batches: int = 8
    max_loss: float = 1.0
    """Points of the validation metric the int8 graph may lose before the export refuses it."""

    def validate(self) -> None:
        """Refuse, before anything is exported, options that cannot work (naming the flag)."""
        if self.calibration != "auto" and self.calibration not in CALIBRATION_METHODS:
            raise EngineError(
                f"--calibration {self.calibration!r}: expected auto or one of {', '.join(CALIBRATION_METHODS)}"
            )
        if self.float_ends is not None and not set(self.float_ends) <= set(FLOAT_ENDS):
            raise EngineError(f"--keep-float {','.join(self.float_ends)}: expected first, last or first,last")
        if self.calibration_batches < 1:
            raise EngineError(f"--calibration-batches must be at least 1, got {self.calibration_batches}")
        if not self.max_loss >= 0:
            raise EngineError(f"--max-loss must be a number of points ≥ 0, got {self.max_loss}")

    def candidates(self, mode: str) -> list[Candidate]:
        """The settings to try, in order (one, unless ``calibration`` is ``auto``)."""
        if mode != "int8":  # dynamic: nothing to calibrate; auto may keep the ends in float
            ends = [self.float_ends] if self.float_ends is not None else [(), FLOAT_ENDS]
            return [Candidate(None, self.per_channel, tuple(e)) for e in ends]
        if self.calibration != "auto":
            return [Candidate(self.calibration, self.per_channel, tuple(self.float_ends or ()))]
        given = self.float_ends  # kept as given: only the methods vary
        order = AUTO_ORDER if given is None else [(method, tuple(given)) for method, _ in AUTO_ORDER]
        return [Candidate(m, self.per_channel, e) for m, e in dict.fromkeys(order)]


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One setting of the quantizer."""

    method: str | None
    """The calibration method; None for dynamic quantization."""
    per_channel: bool
    float_ends: tuple[str, ...]

    def describe(self) -> str:
        parts = [f"{self.method} calibration"] if self.method else []
        parts.append("per-channel weights" if self.per_channel else "per-tensor weights")
        if self.float_ends:
            parts.append(f"{' and '.join(self.float_ends)} layer{'s' if len(self.float_ends) > 1 else ''} in float32")
        return ", ".join(parts)

    def flags(self) -> str:
        flags = [f"--calibration {self.method}"] if self.method else []
        if self.float_ends:
            flags.append(f"--keep-float {','.join(self.float_ends)}")
        if not self.per_channel:
            flags.append("--no-per-channel")
        return " ".join(flags)

    def record(self) -> dict[str, Any]:
        return {"calibration_method": self.method, "per_channel": self.per_channel, "float_ends": list(self.float_ends)}


@dataclasses.dataclass
class Checked:
    """A candidate's graph and how it scored on the check split."""

    candidate: Candidate
    model_bytes: bytes
    int8: float | None
    """The int8 graph's metric; None where the task's outputs have none."""

    def loss(self, fp32: float | None) -> float | None:
        """Points lost against ``fp32`` (negative: gained)."""
        return None if fp32 is None or self.int8 is None else 100.0 * (fp32 - self.int8)


@dataclasses.dataclass
class Choice:
    """The kept graph, the fp32 figure it was held to and every setting tried."""

    kept: Checked
    fp32: float | None
    metric: str
    split: str
    samples: int
    tried: list[Checked]

    @property
    def loss(self) -> float | None:
        return self.kept.loss(self.fp32)

    def record(self, max_loss: float) -> dict[str, Any]:
        """The ``check`` entry of the artifact's ``quantization`` metadata."""
        return {"split": self.split, "metric": self.metric, "samples": self.samples, "fp32": self.fp32,
                "int8": self.kept.int8, "loss_points": _rounded(self.loss), "max_loss": max_loss,
                "tried": [{**c.candidate.record(), "loss_points": _rounded(c.loss(self.fp32))} for c in self.tried]}  # fmt: skip


def choose_int8(model_bytes: bytes, mode: str, options: Int8Options, calibration: Sequence[Any],
                score: Callable[[Any], float | None], fp32_score: float | None, *, metric: str, split: str,
                samples: int, float_tail: bool = False, threads: int = 0) -> Choice:  # fmt: skip
    """Quantize ``model_bytes`` with each of ``options``' candidates until one loses at most
    ``max_loss`` points of ``score`` (a runnable → its metric on the check split) against
    ``fp32_score``; refuse (:class:`EngineError`, nothing written) when the kept one loses more.
    Where the metric is unknown (``fp32_score`` None) the first candidate is kept unchecked."""
    candidates = options.candidates(mode)
    tried: list[Checked] = []

    def attempt(candidate: Candidate) -> Checked:
        graph = quantize_onnx(model_bytes, mode, calibration, per_channel=candidate.per_channel, float_tail=float_tail,
                              method=candidate.method or "minmax", float_ends=candidate.float_ends)  # fmt: skip
        checked = Checked(
            candidate, graph, score(OnnxRunner(graph, threads=threads)) if fp32_score is not None else None
        )
        tried.append(checked)
        return checked

    kept = _first_within(map(attempt, candidates), fp32_score, options.max_loss)
    if kept is None:  # none within the limit: the best one, if the user's limit allows it
        kept = min(tried, key=lambda c: c.loss(fp32_score) or 0.0)
    choice = Choice(kept, fp32_score, metric, split, samples, list(tried))
    loss = choice.loss
    if loss is not None and loss > options.max_loss:
        helper = None
        if options.calibration != "auto" and mode == "int8":  # measure what --calibration auto would keep
            others = [c for c in Int8Options(per_channel=options.per_channel).candidates(mode) if c != kept.candidate]
            helper = _first_within(map(attempt, others), fp32_score, options.max_loss)
        raise EngineError(_refusal(choice, options, helper))
    return choice


def _first_within(checked: Iterable[Checked], fp32: float | None, max_loss: float) -> Checked | None:
    """The first of ``checked`` (evaluated lazily) that loses at most ``max_loss`` points."""
    for c in checked:
        loss = c.loss(fp32)
        if loss is None or loss <= max_loss:
            return c
    return None


def _refusal(choice: Choice, options: Int8Options, helper: Checked | None) -> str:
    """One line: what was lost, with what, and the option that helps."""
    kept, loss = choice.kept, choice.loss
    figure = (f"{choice.fp32:.4f} → {kept.int8:.4f} {choice.split} {choice.metric}, {choice.samples} samples"
              if choice.fp32 is not None and kept.int8 is not None else "")  # fmt: skip
    what = (f"the best of {len(choice.tried)} settings tried ({kept.candidate.describe()})" if len(choice.tried) > 1
            else kept.candidate.describe())  # fmt: skip
    if helper is not None:
        fix = (f"{helper.candidate.flags()} loses {helper.loss(choice.fp32):.1f} (measured; --calibration auto "
               "finds it)")  # fmt: skip
    elif choice.kept.candidate.method is None:
        fix = "--quantize int8 (static, calibrated) may keep more"
    else:
        fix = ("more --calibration-batches, or quantization-aware training (train.qat) may keep more"
               if options.calibration == "auto" else "--calibration auto tries the other settings")  # fmt: skip
    return (f"the int8 graph loses {loss:.1f} points ({figure}) with {what}, more than --max-loss {options.max_loss:g}; "
            f"nothing was written. {fix}; --max-loss {np.ceil(loss * 10) / 10:.1f} writes it anyway")  # fmt: skip


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(float(value), 3)
