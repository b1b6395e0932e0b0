"""Export a trained run to an engine's format: one self-describing artifact file, checked
against eager on a real batch before it is reported as written."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..core.errors import UsageError
from ..data.loader import make_loader
from ..engines import EngineError, build_engine
from ..engines.artifact import PARITY_TOLERANCE, make_metadata
from .input_contract import record_input_contract
from .runner import load_trained

if TYPE_CHECKING:
    from .int8_check import Int8Options

__all__ = ["PARITY_TOLERANCE", "ExportResult", "export_run"]

@dataclasses.dataclass
class ExportResult:
    """What :func:`export_run` wrote and how close the artifact is to eager."""

    path: Path
    checkpoint: Path
    engine: str
    max_abs_diff: float
    output_scale: float
    metadata: dict[str, Any]
    task_report: Any = None
    """The task's own check of the artifact (:meth:`~modforge.tasks.base.Task.export_report`;
    a detector's :class:`~modforge.tasks.detection.export_check.DetectionParity`), or None."""
    quantization: Any = None
    """With ``quantize``: the int8 artifact against the fp32 graph (:class:`~.quantized.QuantizationReport`)."""


def export_run(
    target: Path,
    engine_spec: Any,
    out: str | Path | None = None,
    *,
    which: str = "best",
    force: bool = False,
    quantize: str | None = None,
    calibration_batches: int = 8,
    int8: Int8Options | None = None,
) -> ExportResult:
    """Write the model of a run folder or checkpoint as an artifact of ``engine_spec``.

    The run's own plug-ins are loaded first (its verified copies, installed entry points or
    ``--plugins``, as for ``modforge test``), so a plug-in engine or part is found.
    ``engine_spec`` is a name or ``{type, args}`` (the engine's options). ``out`` is the
    artifact's path, or an existing folder (or one ending in ``/``) to write it into under
    its default name. Refuses to overwrite an existing file unless ``force``; the artifact
    holds the metadata of :func:`~modforge.engines.artifact.make_metadata` (model config,
    input layout and shape, class names, normalisation, versions, resolved config) and the
    run's ``task``.

    What is exported, how it is compared and what else is checked is the run's task's
    (:meth:`~modforge.tasks.base.Task.export_view`, ``export_difference``,
    ``export_report``): a detector, for one, is exported as its decoded per-location outputs,
    with the threshold, top-k and NMS recorded for ``modforge predict`` to run after the
    graph, and the detections predict will make are compared with the eager model's.

    ``quantize`` (``int8`` or ``int8-dynamic``; the onnx engine only): the fp32 graph is checked
    against eager as always, then quantized — statically with its activation ranges calibrated on
    ``calibration_batches`` batches of the run's validation split (else training split) — and the
    int8 graph is written, with the test-split accuracy of both graphs and their batch-1 latency
    in the result (:mod:`.quantized`). ``int8`` (:class:`~.int8_check.Int8Options`): the calibration
    method (default ``auto``), per-channel weights, layers kept in float32 and the most validation
    points the int8 graph may lose — a graph that loses more is refused, nothing written
    (:mod:`.int8_check`).
    """
    exp, checkpoint = load_trained(Path(target), which)
    cfg = exp.cfg
    engine = build_engine(engine_spec, path="--engine", allowed_modules=cfg.plugins, base_dir=str(cfg.base_dir))
    exp.task.check_export(exp)  # e.g. a continual method that classifies by something other than logits
    if quantize is not None:
        from .quantized import check_quantizable

        check_quantizable(engine, quantize, calibration_batches, int8)
    run_dir = checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else checkpoint.parent
    stem = f"{checkpoint.stem}-{engine.name}" + (f"-{quantize}" if quantize else "")  # best-onnx-int8.onnx
    path = _artifact_path(out, run_dir / "exports", stem, engine)
    if path.exists() and not force:
        raise UsageError(f"{path} exists; choose another --out or pass --force to replace it")
    splits = exp.splits
    source = splits.test or splits.val or splits.train
    batch = next(iter(make_loader(source, dataclasses.replace(exp.loader, num_workers=0), train=False)))
    model = exp.model.eval()
    metadata = make_metadata(
        engine=engine.name,
        model=exp.cfg.to_dict().get("model", {}),
        build={"in_dim": splits.in_dim, "num_classes": splits.num_classes},
        input_shape=list(splits.input_shape),
        input_layout=splits.layout.value,
        class_names=list(splits.class_names),
        normalisation=splits.normalisation,
        config=exp.cfg.to_dict(),
    )
    metadata["input"]["image"] = splits.image
    record_input_contract(metadata, splits, checkpoint)  # the training pictures' look; the source checkpoint
    metadata["task"] = exp.task.name
    metadata["engine_args"] = {k: v for k, v in vars(engine).items() if k != "registered_as"}
    exported, extra = exp.task.export_view(model)
    metadata.update(extra)
    runnable = engine.prepare(exported, batch, train=False)
    with torch.no_grad():
        reference = exported(batch["input"])
    if quantize is None:
        written = engine.save(runnable, path, metadata)
        loaded, _ = engine.load(written)
        with torch.no_grad():
            got = torch.as_tensor(loaded({"input": batch["input"]})["logits"])
    else:  # the fp32 graph must be the model before it is quantized
        with torch.no_grad():
            got = torch.as_tensor(runnable({"input": batch["input"]})["logits"])
        written = None
    diff, scale = exp.task.export_difference(got, reference, metadata)
    # an extension may hold the graph to a looser bound (train.qat: int8 kernels round where eager simulates)
    tolerance = max([PARITY_TOLERANCE, *(e.export_tolerance for e in exp.extensions)])
    if not diff <= tolerance * max(1.0, scale):
        if written is not None:
            written.unlink(missing_ok=True)
        raise EngineError(
            f"the {engine.name} artifact does not reproduce the model (max |Δ| {diff:.3g} on outputs up to "
            f"{scale:.3g}, shapes {list(got.shape)} vs {list(reference.shape)}); nothing was written"
        )
    quantization = None
    if quantize is not None:
        from .quantized import quantize_export

        written, quantization = quantize_export(exp, engine, runnable, path, metadata, quantize, calibration_batches,
                                                int8)  # fmt: skip
    report = exp.task.export_report(model, batch, got, metadata)
    return ExportResult(written, checkpoint, engine.name, diff, scale, metadata, report, quantization)


def _artifact_path(out: str | Path | None, folder: Path, stem: str, engine: Any) -> Path:
    """Where the artifact goes: ``folder/stem+suffix`` by default; inside ``out`` when it is
    a folder (existing, or written with a trailing ``/``); else ``out`` itself, which must end
    in the engine's suffix (a path without one gets it appended)."""
    if out is None:
        return folder / f"{stem}{engine.suffix}"
    text = str(out)
    path = Path(out)
    if path.is_dir() or text.endswith(("/", os.sep)):
        return path / f"{stem}{engine.suffix}"
    if path.exists() and not path.is_file():
        raise UsageError(f"--out {text}: exists and is neither a folder nor a file")
    if engine.suffix and path.suffix != engine.suffix:
        if path.suffix:
            raise UsageError(
                f"--out {text}: an artifact of engine '{engine.name}' ends in {engine.suffix} "
                "(modforge predict recognises artifacts by their suffix); give a file ending in it, or a folder"
            )
        path = path.with_name(path.name + engine.suffix)
    return path
