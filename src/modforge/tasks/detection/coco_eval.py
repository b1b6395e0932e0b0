"""COCO box evaluation through pycocotools — the reference every detection paper reports —
fed from modforge's detection batches.

Nothing of COCO's protocol is re-implemented here: ground truth and detections are turned into
pycocotools' own in-memory ``COCO`` objects and ``COCOeval(..., "bbox")`` computes every
number. What this module does is the bookkeeping around it:

* :class:`DetectionRecords` collects, batch by batch, the ground truth (``targets``) and the
  detections (``dt_bboxes``: one ``[M, 7]`` tensor of ``batch_index, x1, y1, x2, y2, score,
  label``, UP's convention) in the *original* image's pixels — boxes of the resized input are
  divided by the batch's ``scale`` — so the figures are those of the dataset's own annotation
  files; several processes' records are gathered before evaluating.
* :func:`coco_box_metrics` runs the evaluation and returns ``map`` (AP at IoU .50:.95),
  ``map_50``, ``map_75``, ``map_small/medium/large``, ``mar_100`` and per-class AP.

A target may carry ``orig_boxes`` (x1y1x2y2 in original pixels, exact), ``iscrowd`` and
``area`` (COCO's fields: a crowd region is matched but never counted as a miss; ``area``
decides small/medium/large); without them the boxes are scaled back and the area is the
box's.
"""

from __future__ import annotations

import contextlib
import io
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

__all__ = ["SUMMARY_NAMES", "DetectionRecords", "coco_box_metrics"]

SUMMARY_NAMES = (
    "map", "map_50", "map_75", "map_small", "map_medium", "map_large", "mar_1", "mar_10", "mar_100",
    "mar_small", "mar_medium", "mar_large",
)  # fmt: skip
"""The names of ``COCOeval.stats``' twelve numbers, in its order."""


def _xywh(boxes: np.ndarray) -> np.ndarray:
    return np.concatenate([boxes[:, :2], boxes[:, 2:] - boxes[:, :2]], axis=1)


class DetectionRecords:
    """Ground truth and detections of an evaluation pass, in original-image pixels, keyed by
    image id (an image seen twice — a padded last shard — counts once)."""

    def __init__(self) -> None:
        self.images: dict[int, dict[str, Any]] = {}
        self.detections: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.images)

    def add_batch(self, out: dict[str, Any]) -> None:
        """Record one batch: its ``targets``, ``image_id``, ``scale``, ``orig_sizes`` and
        ``dt_bboxes``."""
        targets: Sequence[dict[str, Any]] = out["targets"]
        ids = torch.as_tensor(out["image_id"]).reshape(-1).tolist()
        scales = torch.as_tensor(out["scale"], dtype=torch.float64).reshape(-1).tolist()
        sizes = torch.as_tensor(out["orig_sizes"]).reshape(-1, 2).tolist()
        found = torch.as_tensor(out["dt_bboxes"]).detach().to("cpu", torch.float64).reshape(-1, 7).numpy()
        for i, (image_id, scale, size, target) in enumerate(zip(ids, scales, sizes, targets, strict=True)):
            if image_id in self.images:
                continue
            self.images[image_id] = self._ground_truth(target, scale, size)
            mine = found[found[:, 0] == i]
            rows = np.concatenate([mine[:, 1:5] / scale, mine[:, 5:7]], axis=1) if len(mine) else np.zeros((0, 6))
            self.detections[image_id] = rows

    @staticmethod
    def _ground_truth(target: dict[str, Any], scale: float, size: Sequence[int]) -> dict[str, Any]:
        boxes = target.get("orig_boxes")
        if boxes is None:
            boxes = torch.as_tensor(target["boxes"], dtype=torch.float64) / scale
        boxes = torch.as_tensor(boxes, dtype=torch.float64).reshape(-1, 4).cpu().numpy()
        labels = torch.as_tensor(target["labels"]).reshape(-1).cpu().numpy()
        crowd = target.get("iscrowd")
        crowd = np.zeros(len(boxes), dtype=np.int64) if crowd is None else torch.as_tensor(crowd).cpu().numpy()
        area = target.get("area")
        xywh = _xywh(boxes)
        area = xywh[:, 2] * xywh[:, 3] if area is None else torch.as_tensor(area, dtype=torch.float64).cpu().numpy()
        return {"height": int(size[0]), "width": int(size[1]), "boxes": xywh, "labels": labels, "iscrowd": crowd,
                "area": area}  # fmt: skip

    def merge(self, others: Sequence[DetectionRecords]) -> None:
        """Take in other processes' records (images already here are kept)."""
        for other in others:
            for image_id, gt in other.images.items():
                if image_id not in self.images:
                    self.images[image_id] = gt
                    self.detections[image_id] = other.detections[image_id]

    def to_coco(self, num_classes: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """(a COCO ground-truth dict, the detections as COCO result records); category id =
        label + 1 (COCO ids start at 1)."""
        images, annotations, results = [], [], []
        for image_id in sorted(self.images):
            gt = self.images[image_id]
            images.append({"id": image_id, "height": gt["height"], "width": gt["width"]})
            for box, label, crowd, area in zip(gt["boxes"], gt["labels"], gt["iscrowd"], gt["area"], strict=True):
                annotations.append({
                    "id": len(annotations) + 1, "image_id": image_id, "category_id": int(label) + 1,
                    "bbox": [float(v) for v in box], "area": float(area), "iscrowd": int(crowd),
                })  # fmt: skip
            for x1, y1, x2, y2, score, label in self.detections[image_id]:
                results.append({"image_id": image_id, "category_id": int(label) + 1,
                                "bbox": [float(x1), float(y1), float(x2 - x1), float(y2 - y1)], "score": float(score)})  # fmt: skip
        categories = [{"id": k + 1, "name": str(k)} for k in range(num_classes)]
        return {"images": images, "annotations": annotations, "categories": categories}, results


def coco_box_metrics(
    ground_truth: dict[str, Any],
    results: list[dict[str, Any]],
    class_names: Sequence[str] | None = None,
    *,
    curves: bool = False,
) -> dict[str, Any]:
    """COCO box metrics of ``results`` against ``ground_truth`` (both in COCO's JSON form),
    computed by pycocotools: :data:`SUMMARY_NAMES` (NaN where COCO reports -1: no ground
    truth of that size) and ``per_class`` AP (0.50:0.95) keyed by class name. No detections
    at all gives AP 0 wherever there is ground truth. ``curves``: also ``pr_curves``, each
    class's precision at COCO's 101 recall points at IoU 0.5 (all sizes, 100 detections)."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints its progress
        gt = COCO()
        gt.dataset = ground_truth
        gt.createIndex()
        if not results:
            return _empty(ground_truth, class_names) | ({"pr_curves": {}} if curves else {})
        dt = gt.loadRes(results)
        evaluator = COCOeval(gt, dt, "bbox")
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    stats = [float(v) for v in evaluator.stats]
    metrics: dict[str, Any] = {name: (math.nan if v < 0 else v) for name, v in zip(SUMMARY_NAMES, stats, strict=True)}
    precision = evaluator.eval["precision"]  # [IoU thresholds, recall points, classes, areas, max dets]
    per_class = {}
    for k, category in enumerate(evaluator.params.catIds):
        values = precision[:, :, k, 0, -1]
        values = values[values > -1]
        per_class[_class_name(category, ground_truth, class_names)] = float(values.mean()) if values.size else math.nan
    metrics["per_class"] = per_class
    if curves:
        metrics["pr_curves"] = {
            _class_name(category, ground_truth, class_names): precision[0, :, k, 0, -1].tolist()
            for k, category in enumerate(evaluator.params.catIds)
        }
    return metrics


def _class_name(category: int, ground_truth: dict[str, Any], class_names: Sequence[str] | None) -> str:
    if class_names is not None and 0 < category <= len(class_names):
        return str(class_names[category - 1])
    names = {c["id"]: c.get("name", str(c["id"])) for c in ground_truth.get("categories", [])}
    return str(names.get(category, category))


def _empty(ground_truth: dict[str, Any], class_names: Sequence[str] | None) -> dict[str, Any]:
    """What COCOeval would say about no detections: 0 where ground truth exists (NaN for
    sizes without any), recall 0 too."""
    counted = [a for a in ground_truth.get("annotations", []) if not a.get("iscrowd")]
    metrics: dict[str, Any] = {name: (0.0 if counted else math.nan) for name in SUMMARY_NAMES}
    for size, (low, high) in {"small": (0, 32**2), "medium": (32**2, 96**2), "large": (96**2, 1e10)}.items():
        if not any(low <= a["area"] < high for a in counted):
            metrics[f"map_{size}"] = metrics[f"mar_{size}"] = math.nan
    seen = {a["category_id"] for a in counted}
    metrics["per_class"] = {
        _class_name(c["id"], ground_truth, class_names): (0.0 if c["id"] in seen else math.nan)
        for c in ground_truth.get("categories", [])
    }
    return metrics
