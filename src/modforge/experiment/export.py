"""Export a trained run to an engine's format: one self-describing artifact file, checked
against eager on a real batch before it is reported as written."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..core.errors import UsageError
from ..data.loader import make_loader
from ..engines import EngineError, build_engine
from ..engines.artifact import make_metadata
from .runner import load_trained

__all__ = ["BOX_TOLERANCE", "PARITY_TOLERANCE", "DetectionParity", "ExportResult", "export_run"]

PARITY_TOLERANCE = 1e-5  # max |Δ| vs eager, relative to the output's scale (at least 1)
BOX_TOLERANCE = 1e-4  # pixels: a detector artifact's boxes vs the eager model's


@dataclasses.dataclass
class ExportResult:
    """What :func:`export_run` wrote and how close the artifact is to eager."""

    path: Path
    checkpoint: Path
    engine: str
    max_abs_diff: float
    output_scale: float
    metadata: dict[str, Any]
    detections: DetectionParity | None = None


@dataclasses.dataclass
class DetectionParity:
    """How a detector artifact's detections, post-processed as ``modforge predict`` does, compare
    with the eager model's ``dt_bboxes`` on the export batch.

    Attributes:
        eager: detections of the eager model.
        artifact: detections of the artifact.
        equal: same count, labels and order, boxes within :data:`BOX_TOLERANCE` px, scores within
            :data:`PARITY_TOLERANCE`.
        max_box_diff: largest box coordinate difference in pixels (inf when not comparable).
    """

    eager: int
    artifact: int
    equal: bool
    max_box_diff: float


def export_run(target: Path, engine_spec: Any, out: str | Path | None = None, *, which: str = "best",
               force: bool = False) -> ExportResult:
    """Write the model of a run folder or checkpoint as an artifact of ``engine_spec``.

    The run's own plug-ins are loaded first (its verified copies, installed entry points or
    ``--plugins``, as for ``modforge test``), so a plug-in engine or part is found.
    ``engine_spec`` is a name or ``{type, args}`` (the engine's options). ``out`` is the
    artifact's path, or an existing folder (or one ending in ``/``) to write it into under
    its default name. Refuses to overwrite an existing file unless ``force``; the artifact
    holds the metadata of :func:`~modforge.engines.artifact.make_metadata` (model config,
    input layout and shape, class names, normalisation, versions, resolved config) and the
    run's ``task``.

    A detector (task ``detection``) is exported as its
    :class:`~modforge.engines.detection.DetectionOutputs` view: normalised, padded image batch
    → every location's decoded boxes, class probabilities and quality. The threshold, top-k
    and NMS are data-dependent (ONNX cannot express them from the model's code; a trace would
    freeze one image's path), so they run after the runtime, in ``modforge predict``, with
    the settings recorded under ``postprocess``. The check against eager is on those outputs
    (boxes to the tolerance times the largest coordinate, scores to the tolerance), and the
    detections predict will make of them are compared with the eager model's ``dt_bboxes`` and
    reported (:class:`DetectionParity`).
    """
    exp, checkpoint = load_trained(Path(target), which)
    cfg = exp.cfg
    engine = build_engine(engine_spec, path="--engine", allowed_modules=cfg.plugins, base_dir=str(cfg.base_dir))
    exp.task.check_export(exp)  # e.g. a continual method that classifies by something other than logits
    run_dir = checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else checkpoint.parent
    path = _artifact_path(out, run_dir / "exports", f"{checkpoint.stem}-{engine.name}", engine)
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
    metadata["task"] = exp.task.name
    metadata["engine_args"] = {k: v for k, v in vars(engine).items() if k != "registered_as"}
    detector = exp.task.name == "detection"
    exported = model
    if detector:  # image batch → decoded per-location outputs; thresholds, top-k and NMS run after it
        from ..engines.detection import DetectionOutputs

        exported = DetectionOutputs(model).eval()
        metadata["postprocess"] = exported.settings
    runnable = engine.prepare(exported, batch, train=False)
    written = engine.save(runnable, path, metadata)
    loaded, _ = engine.load(written)
    with torch.no_grad():
        reference = exported(batch["input"])
        got = torch.as_tensor(loaded({"input": batch["input"]})["logits"])
    if detector:
        diff, scale = _detector_diff(got, reference, int(metadata["postprocess"]["num_classes"]))
    else:
        diff = float((got - reference).abs().max()) if got.shape == reference.shape else float("inf")
        scale = float(reference.abs().max())
    if not diff <= PARITY_TOLERANCE * max(1.0, scale):
        written.unlink(missing_ok=True)
        raise EngineError(
            f"the {engine.name} artifact does not reproduce the model (max |Δ| {diff:.3g} on outputs up to "
            f"{scale:.3g}, shapes {list(got.shape)} vs {list(reference.shape)}); nothing was written"
        )
    parity = _detection_parity(model, batch, got, metadata["postprocess"]) if detector else None
    return ExportResult(written, checkpoint, engine.name, diff, scale, metadata, parity)


def _detector_diff(got: torch.Tensor, reference: torch.Tensor, classes: int) -> tuple[float, float]:
    """``(max |Δ|, scale)`` of a detector's decoded outputs, on the scale of the outputs' boxes: the
    boxes may differ by the parity tolerance times the largest coordinate, the probabilities,
    quality and level (in [0, 1] and small integers) by that tolerance times 1, so the
    boxes' size in pixels never loosens the check of the scores."""
    if got.shape != reference.shape:
        return float("inf"), float(reference.abs().max()) if reference.numel() else 0.0
    if reference.numel() == 0:
        return 0.0, 0.0
    scale = max(1.0, float(reference[..., :4].abs().max()))
    boxes = float((got[..., :4] - reference[..., :4]).abs().max())
    rest = float((got[..., 4:] - reference[..., 4:]).abs().max())
    return max(boxes, rest * scale), scale


def _detection_parity(model: Any, batch: dict[str, Any], outputs: torch.Tensor,
                      settings: dict[str, Any]) -> DetectionParity:  # fmt: skip
    """The artifact's detections (its outputs post-processed as ``modforge predict`` does) against
    the eager model's ``dt_bboxes`` on the same batch. Reported, not enforced: with outputs equal
    within the parity tolerance, only a candidate within that tolerance of the score threshold or
    of an NMS overlap limit can come out differently."""
    from ..tasks.detection.predict import postprocess

    sizes = torch.as_tensor(batch["image_sizes"]).reshape(-1, 2)
    with torch.no_grad():
        eager = model({"input": batch["input"], "image_sizes": sizes})["dt_bboxes"].float().cpu().numpy()
    found = postprocess(outputs.float().cpu().numpy(), sizes.cpu().numpy(), settings)
    if found.shape != eager.shape:
        return DetectionParity(len(eager), len(found), False, float("inf"))
    box_diff = float(np.abs(found[:, 1:5] - eager[:, 1:5]).max()) if len(eager) else 0.0
    same = bool((found[:, [0, 6]] == eager[:, [0, 6]]).all()) and bool(
        np.abs(found[:, 5] - eager[:, 5]).max(initial=0.0) <= PARITY_TOLERANCE
    )
    return DetectionParity(len(eager), len(found), same and box_diff <= BOX_TOLERANCE, box_diff)


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
