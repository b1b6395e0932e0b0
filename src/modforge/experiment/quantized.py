"""``modforge export RUN --engine onnx --quantize int8``: an int8 ONNX artifact of a run, calibrated
on the run's own validation data, reported beside the fp32 graph it came from.

The fp32 graph is exported and checked against eager first (as every export is); it is then
quantized (:mod:`modforge.engines.quantize`) with each candidate setting in turn, checked against
the fp32 graph on the validation split (:mod:`.int8_check`: a graph that loses more than
``--max-loss`` points is refused), and the kept int8 graph is written in its place, its metadata
recording how (``quantization``: mode, calibration method, per-channel weights, float ends,
calibration batches and split, and the check with every setting tried). The report runs
both graphs on the test split (else validation): each one's metric — top-1 accuracy, or for a
detector the COCO mAP of its outputs post-processed as ``modforge predict`` does — how often a
classifier's two graphs agree, and each one's forward latency at batch 1 (median of 50 runs after
5 warm-up runs, the engine's threads) — the accuracy given up for the speed gained.

A detector keeps its predictors and decoding in float32 (``float_tail``): its artifact is decoded
boxes, which int8 would round to 256 levels over the image.
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import UsageError
from ..data.loader import make_loader
from ..engines.onnx import Onnx
from ..engines.onnx_runtime import OnnxRunner
from ..engines.quantize import QUANTIZE_MODES
from .int8_check import Candidate, Choice, Int8Options, choose_int8
from .profile import median_ms

__all__ = ["Int8Options", "QuantizationReport", "check_quantizable", "quantize_export"]

LATENCY_RUNS, LATENCY_WARMUP = 50, 5


@dataclasses.dataclass
class QuantizationReport:
    """The int8 graph against the fp32 one."""

    mode: str
    calibration_batches: int
    calibration_split: str
    split: str
    samples: int
    fp32_accuracy: float | None
    int8_accuracy: float | None
    agreement: float | None
    fp32_ms: float
    int8_ms: float
    metric: str = "accuracy"
    """What ``fp32_accuracy``/``int8_accuracy`` measure: top-1 ``accuracy``, or ``mAP`` (COCO, 0.50:0.95)."""
    extra: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)
    """Further figures of both graphs (a detector's mAP@0.5 and mAP@0.75)."""
    settings: Candidate | None = None
    """The quantizer's setting that was kept (calibration method, per-channel weights, float ends)."""
    check: Choice | None = None
    """The validation check the setting passed (:mod:`.int8_check`)."""
    max_loss: float = 1.0

    @property
    def speedup(self) -> float:
        return self.fp32_ms / self.int8_ms if self.int8_ms > 0 else float("inf")

    def rows(self) -> list[tuple[str, str]]:
        how = ("static, QDQ, calibrated on " f"{self.calibration_batches} {self.calibration_split} batch(es)"
               if self.mode == "int8" else "dynamic (weights int8, activations per batch)")  # fmt: skip
        if self.settings is not None:
            how += f" — {self.settings.describe()}"
        rows = [("quantization", f"{self.mode}: {how}")]
        if self.check is not None:
            rows.append(("int8 check", self._check_row()))
        if self.fp32_accuracy is not None and self.int8_accuracy is not None:
            change = (f"{100 * (self.int8_accuracy - self.fp32_accuracy):+.2f} points" if self.metric == "accuracy"
                      else f"{self.int8_accuracy - self.fp32_accuracy:+.4f}")  # fmt: skip
            rows.append((f"{self.split} {self.metric} fp32 → int8",
                         f"{self.fp32_accuracy:.4f} → {self.int8_accuracy:.4f} ({change}, {self.samples} samples)"))  # fmt: skip
        for name, (a, b) in self.extra.items():
            rows.append((f"{self.split} {name} fp32 → int8", f"{a:.4f} → {b:.4f} ({b - a:+.4f})"))
        if self.agreement is not None:
            rows.append((f"{self.split} top-1 agreement", f"{self.agreement:.4f}"))
        rows.append(("latency batch 1 fp32 → int8", f"{self.fp32_ms:.3f} → {self.int8_ms:.3f} ms ({self._speed()})"))
        return rows

    def _speed(self) -> str:
        """The speed-up in words; a graph int8 made slower is said to be slower, with why and what serves better."""
        if self.speedup >= 1.0:
            return f"{self.speedup:.2f}× faster"
        return (f"{1 / self.speedup:.2f}× SLOWER: on a graph this small the conversions between int8 and float32 "
                "cost more than the integer arithmetic saves; the fp32 artifact serves better")  # fmt: skip

    def _check_row(self) -> str:
        check = self.check
        assert check is not None
        tried = f" ({len(check.tried)} settings tried)" if len(check.tried) > 1 else ""
        if check.loss is None:
            return f"not measured: this task's outputs have no {check.metric} to compare{tried}"
        verdict = "within" if check.loss <= 1.0 else "MORE than 1 point, accepted by"
        return (f"{check.split} {check.metric} {check.fp32:.4f} → {check.kept.int8:.4f} ({100 * (check.kept.int8 - check.fp32):+.2f} points, "
                f"{check.samples} samples): {verdict} --max-loss {self.max_loss:g}{tried}")  # fmt: skip


def check_quantizable(engine: Any, mode: str, calibration_batches: int, options: Int8Options | None = None) -> None:
    """Refuse, before anything is exported, what cannot be quantized: another engine, an unknown
    mode, no calibration batch, an option out of range."""
    if not isinstance(engine, Onnx):
        raise UsageError(f"--quantize makes an int8 ONNX graph: use it with --engine onnx (not '{engine.name}')")
    if mode not in QUANTIZE_MODES:
        raise UsageError(f"--quantize {mode!r}: expected one of {', '.join(QUANTIZE_MODES)}")
    if calibration_batches < 1:
        raise UsageError(f"--calibration-batches must be at least 1, got {calibration_batches}")
    if options is not None:
        options.validate()
        if mode != "int8" and options.calibration != "auto":
            raise UsageError(f"--calibration {options.calibration} calibrates a static graph (--quantize int8); "
                             f"{mode} quantizes activations per batch, without calibration")  # fmt: skip


def quantize_export(exp: Any, engine: Onnx, fp32: OnnxRunner, path: Path, metadata: dict[str, Any], mode: str,
                    calibration_batches: int, options: Int8Options | None = None) -> tuple[Path, QuantizationReport]:  # fmt: skip
    """Quantize the checked fp32 graph (each candidate setting of ``options`` in turn, checked on
    the validation split: :mod:`.int8_check`), write the kept int8 artifact at ``path``, compare
    the two graphs on the test split."""
    options = dataclasses.replace(options or Int8Options(), calibration_batches=calibration_batches)
    splits = exp.splits
    calibration_split, calibration_name = (splits.val, "val") if splits.val is not None else (splits.train, "train")
    settings = dataclasses.replace(exp.loader, num_workers=0)
    calibration = []
    if mode == "int8":
        batches = make_loader(calibration_split, settings, train=False)
        calibration = [batch["input"].numpy() for batch in itertools.islice(batches, calibration_batches)]
    detector = exp.task.name == "detection"
    check_loader = make_loader(calibration_split, settings, train=False)
    if detector:
        score = _detector_score(exp, check_loader, metadata)
        metric = "mAP"
    else:
        score, metric = _classifier_score(check_loader)
    choice = choose_int8(fp32.model_bytes, mode, options, calibration, score, score(fp32) if score else None,
                         metric=metric, split=calibration_name, samples=len(calibration_split), float_tail=detector,
                         threads=engine.threads)  # fmt: skip
    int8 = OnnxRunner(choice.kept.model_bytes, threads=engine.threads, optimization=engine.optimization)
    metadata = {**metadata, "quantization": {"mode": mode, **choice.kept.candidate.record(),
                                             "calibration_batches": len(calibration),
                                             "calibration_split": calibration_name if calibration else None,
                                             "check": choice.record(options.max_loss)}}  # fmt: skip
    written = engine.save(int8, path, metadata)
    loaded, _ = engine.load(written)
    test, name = (splits.test, "test") if splits.test is not None else (splits.val, "val")
    if test is None:
        test, name = splits.train, "train"
    loader = make_loader(test, settings, train=False)
    if detector:
        report = _compare_detectors(exp, fp32, loaded, loader, metadata, mode, len(calibration), calibration_name,
                                    name, len(test))  # fmt: skip
    else:
        report = QuantizationReport(mode, len(calibration), calibration_name, name, *_compare(fp32, loaded, loader))
    return written, dataclasses.replace(report, settings=choice.kept.candidate, check=choice, max_loss=options.max_loss)


def _classifier_score(loader: Any) -> tuple[Any, str]:
    """(a runnable → its top-1 accuracy on ``loader``'s batches, held in memory; "accuracy"), or
    (None, "accuracy") where the batches have no class labels for one-logit-per-class outputs."""
    batches = [(batch["input"].numpy(), batch.get("label")) for batch in loader]
    if not batches or any(y is None or y.dim() != 1 for _, y in batches):
        return None, "accuracy"
    labelled = [(x, y.numpy()) for x, y in batches]

    def score(runner: Any) -> float | None:
        right = total = 0
        for x, y in labelled:
            logits = np.asarray(runner({"input": x})["logits"])
            if logits.ndim != 2 or logits.shape[1] < 2:
                return None
            right += int((logits.argmax(1) == y).sum())
            total += len(y)
        return right / max(1, total)

    return score, "accuracy"


def _detector_score(exp: Any, loader: Any, metadata: dict[str, Any]) -> Any:
    """A runnable → its COCO mAP on ``loader`` after ``modforge predict``'s post-processing."""
    from ..tasks.detection.export_check import artifact_box_metrics

    names = list(getattr(exp.splits.train, "class_names", None) or []) or None
    settings = metadata["postprocess"]

    def score(runner: Any) -> float:
        return float(
            artifact_box_metrics({"g": runner}, loader, settings, int(settings["num_classes"]), names)["g"]["map"]
        )

    return score


def _compare_detectors(exp: Any, fp32: Any, int8: Any, loader: Any, metadata: dict[str, Any], mode: str,
                       calibration: int, calibration_name: str, split: str, samples: int) -> QuantizationReport:  # fmt: skip
    """Both detector graphs' COCO metrics on ``loader`` and their latency at batch 1."""
    from ..tasks.detection.export_check import artifact_box_metrics

    names = list(getattr(exp.splits.train, "class_names", None) or []) or None
    settings = metadata["postprocess"]
    metrics = artifact_box_metrics({"fp32": fp32, "int8": int8}, loader, settings, int(settings["num_classes"]), names)
    first = next(iter(loader))["input"].numpy()[:1]
    fp32_ms = median_ms(lambda: fp32({"input": first}), LATENCY_RUNS, LATENCY_WARMUP)
    int8_ms = median_ms(lambda: int8({"input": first}), LATENCY_RUNS, LATENCY_WARMUP)
    a, b = metrics["fp32"], metrics["int8"]
    extra = {label: (a[key], b[key]) for key, label in (("map_50", "mAP@0.5"), ("map_75", "mAP@0.75"))}
    return QuantizationReport(mode, calibration, calibration_name, split, samples, a["map"], b["map"],
                              None, fp32_ms, int8_ms, metric="mAP", extra=extra)  # fmt: skip


def _compare(fp32: Any, int8: Any, loader: Any) -> tuple[int, float | None, float | None, float, float, float]:
    """(samples, fp32 accuracy, int8 accuracy, top-1 agreement, fp32 ms, int8 ms) on ``loader``."""
    samples, right32, right8, same = 0, 0, 0, 0
    classified = True
    first = None
    for batch in loader:
        x = batch["input"].numpy()
        first = x[:1] if first is None else first
        a, b = fp32({"input": x})["logits"], int8({"input": x})["logits"]
        labels = batch.get("label")
        top_a, top_b = _top1(a), _top1(b)
        same += int((top_a == top_b).sum())
        if labels is not None and labels.dim() == 1 and a.ndim == 2 and a.shape[1] > 1:
            labels = labels.numpy()
            right32 += int((top_a == labels).sum())
            right8 += int((top_b == labels).sum())
        else:
            classified = False
        samples += len(x)
    fp32_ms = median_ms(lambda: fp32({"input": first}), LATENCY_RUNS, LATENCY_WARMUP)
    int8_ms = median_ms(lambda: int8({"input": first}), LATENCY_RUNS, LATENCY_WARMUP)
    accuracy = (right32 / samples, right8 / samples) if classified and samples else (None, None)
    return samples, *accuracy, same / max(1, samples), fp32_ms, int8_ms


def _top1(logits: np.ndarray) -> np.ndarray:
    """The predicted class of each row (a one-column or flat output: its sign)."""
    logits = np.asarray(logits)
    if logits.ndim == 2 and logits.shape[1] > 1:
        return logits.argmax(1)
    return (logits.reshape(len(logits), -1)[:, 0] > 0).astype(np.int64)
