"""The detection task: boxes in, COCO AP out.

Training validates with ``coco_map`` (pycocotools' COCOeval on the split's boxes) and keeps
the checkpoint with the highest ``val_map``. The test evaluates the split the same way and
writes, next to the summary's figures (AP overall, at 0.5 and 0.75, per size, per class):

* ``detections.json`` — the detections as COCO result records (original image pixels and the
  dataset's own category ids), the file a paper's evaluation script reads;
* ``detections.png`` — the first images of the split with ground truth and detections;
* ``pr.png`` — each class's precision–recall curve at IoU 0.5.

The model's head writes ``dt_bboxes`` (UP's ``[M, 7]`` rows: batch index, x1, y1, x2, y2,
score, label) in evaluation, and its loss keys when targets are present.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...core.registries import register_task
from ...core.safe_files import ensure_folder, write_atomic
from ..base import Task
from .metrics import CocoMAP

__all__ = ["DetectionTask"]

log = logging.getLogger("modforge.tasks")

PICTURED = 8
"""How many images ``detections.png`` shows."""


@register_task("detection")
class DetectionTask(Task):
    """Object detection: per-image ``targets`` (boxes, labels) in, ``dt_bboxes`` out."""

    name = "detection"
    default_metrics = ("coco_map", "loss")
    monitor_preference = ("map", "loss")
    folds_refusal = ("a detection image holds boxes of several classes, so there is no one label per image to "
                     "stratify folds by")  # fmt: skip

    def export_view(self, model: Any) -> tuple[Any, dict[str, Any]]:
        """Image batch → every location's decoded boxes, class probabilities and quality. The
        threshold, top-k and NMS are data-dependent (ONNX cannot express them from the model's
        code; a trace would freeze one image's path), so they run after the runtime, in
        ``modforge predict``, with the settings recorded under ``postprocess``."""
        from ...engines.detection import DetectionOutputs

        view = DetectionOutputs(model).eval()
        return view, {"postprocess": view.settings}

    def export_difference(self, got: Any, reference: Any, metadata: dict[str, Any]) -> tuple[float, float]:
        from .export_check import detector_difference

        return detector_difference(got, reference)

    def export_report(self, model: Any, batch: dict[str, Any], got: Any, metadata: dict[str, Any]) -> Any:
        """What ``modforge predict`` will make of the artifact's outputs, against the eager
        model's ``dt_bboxes`` (:class:`~.export_check.DetectionParity`)."""
        from .export_check import detection_parity

        return detection_parity(model, batch, got, metadata["postprocess"])

    def test(self, trainer: Any, loader: Any, dataset: Any, *, split: str, out_dir: Path | None, stem: str) -> dict:
        coco = next((m for m in trainer.metrics.values() if isinstance(m, CocoMAP)), None)
        added = coco is None
        if added:  # the configured metrics lack it: the report needs it anyway
            coco = CocoMAP(num_classes=_num_classes(dataset, trainer), class_names=_names(dataset))
            trainer.metrics["coco_map"] = coco
        try:
            row = trainer.evaluate(loader, split)
        finally:
            if added:
                del trainer.metrics["coco_map"]
        prefix = f"{split}_"
        figures = {k[len(prefix) :]: v for k, v in row.items()}
        figures.update({k[len(prefix) :]: v for k, v in trainer.extra_results.items() if k.startswith(prefix)})
        if out_dir is not None:
            ensure_folder(out_dir)
            self._write_results(coco, dataset, out_dir / f"{stem}detections.json")
            self._pictures(trainer, loader, dataset, out_dir, stem, split, coco)
        return {split: figures}

    @staticmethod
    def _write_results(coco: CocoMAP, dataset: Any, path: Path) -> None:
        _, results = coco.records.to_coco(coco.num_classes)
        to_category = getattr(dataset, "label_to_category", None)
        if to_category:
            for record in results:
                record["category_id"] = int(to_category[record["category_id"] - 1])
        write_atomic(path, json.dumps(results))

    @staticmethod
    def _pictures(trainer: Any, loader: Any, dataset: Any, out_dir: Path, stem: str, split: str, coco: CocoMAP) -> None:
        from .plots import plot_detections, plot_precision_recall

        if getattr(coco, "curves", None):
            plot_precision_recall(coco.curves, out_dir / f"{stem}pr.png", title=f"{split}: precision–recall at IoU 0.5")
        images, truths, found = _first_images(trainer, loader, dataset, PICTURED)
        if images:
            plot_detections(images, truths, found, _names(dataset) or [], out_dir / f"{stem}detections.png",
                            title=f"{split}: first {len(images)} images")  # fmt: skip


@torch.no_grad()
def _first_images(trainer: Any, loader: Any, dataset: Any, count: int) -> tuple[list, list, list]:
    """The first ``count`` images of ``loader`` (de-normalised, unpadded) with their ground
    truth and the model's detections, in the resized image's pixels."""
    norm = getattr(dataset, "transforms", None)
    mean = np.asarray(getattr(norm, "mean", (0.0, 0.0, 0.0)), dtype=np.float32)
    std = np.asarray(getattr(norm, "std", (1.0, 1.0, 1.0)), dtype=np.float32)
    was_training = trainer.model.training
    trainer.train_mode(False)
    images, truths, found = [], [], []
    try:
        for batch in loader:
            out = trainer.model(trainer.prepare_batch(batch))
            rows = out["dt_bboxes"].detach().cpu().numpy()
            for i, target in enumerate(batch["targets"]):
                h, w = (int(v) for v in batch["image_sizes"][i])
                picture = batch["input"][i, :, :h, :w].permute(1, 2, 0).cpu().numpy() * std + mean
                images.append(picture)
                truths.append((target["boxes"].cpu().numpy(), target["labels"].cpu().numpy()))
                found.append(rows[rows[:, 0] == i][:, 1:7])
                if len(images) == count:
                    return images, truths, found
    finally:
        trainer.train_mode(was_training)
    return images, truths, found


def _num_classes(dataset: Any, trainer: Any) -> int:
    count = getattr(dataset, "num_classes", None)
    return int(count) if count is not None else int(getattr(trainer.model, "num_classes", 1))


def _names(dataset: Any) -> list[str] | None:
    names = getattr(dataset, "class_names", None)
    return list(names) if names else None
