"""How an exported detector is checked against the eager model.

A detector's artifact holds its decoded per-location outputs (boxes, class probabilities,
quality, level; :class:`~modforge.engines.detection.DetectionOutputs`); the threshold, top-k
and NMS run after the runtime, in ``modforge predict``. So the export compares those outputs
— boxes on the scale of the boxes, scores on their own — and then what predict will make of
them with the eager model's ``dt_bboxes`` on the same batch.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from ...engines.artifact import PARITY_TOLERANCE

__all__ = [
    "BOX_TOLERANCE",
    "SCORE_TOLERANCE",
    "DetectionParity",
    "artifact_box_metrics",
    "detection_parity",
    "detector_difference",
]

BOX_TOLERANCE = 1e-4
"""Pixels: how far an artifact's boxes may be from the eager model's."""
SCORE_TOLERANCE = PARITY_TOLERANCE
"""How far an artifact's scores may be from the eager model's (the export's parity tolerance)."""


@dataclasses.dataclass
class DetectionParity:
    """How a detector artifact's detections, post-processed as ``modforge predict`` does, compare
    with the eager model's ``dt_bboxes`` on the export batch.

    Attributes:
        eager: detections of the eager model.
        artifact: detections of the artifact.
        equal: same count, labels and order, boxes within :data:`BOX_TOLERANCE` px, scores within
            :data:`SCORE_TOLERANCE`.
        max_box_diff: largest box coordinate difference in pixels (inf when not comparable).
        settings: the post-processing predict runs (threshold, top-k, NMS, detections per image).
    """

    eager: int
    artifact: int
    equal: bool
    max_box_diff: float
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)

    def rows(self) -> list[tuple[str, str]]:
        """The export command's table rows: where post-processing runs, and the comparison."""
        post = self.settings
        rows = [("after the graph", f"{post.get('type')} post-processing in predict: score > "
                 f"{post.get('score_threshold')}, top {post.get('pre_nms_topk')} per level, class-aware NMS at "
                 f"IoU {post.get('nms_threshold')}, {post.get('max_detections')} per image")]  # fmt: skip
        if self.equal:
            shown = f"{self.eager} equal to eager's (max box |Δ| {self.max_box_diff:.2e} px)"
        else:
            shown = (f"{self.artifact} vs eager's {self.eager}, NOT all equal (max box |Δ| "
                     f"{self.max_box_diff:.2e} px): candidates at the score threshold or an NMS limit")  # fmt: skip
        rows.append(("detections", shown))
        return rows


def detector_difference(got: torch.Tensor, reference: torch.Tensor) -> tuple[float, float]:
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


def detection_parity(
    model: Any, batch: dict[str, Any], outputs: torch.Tensor, settings: dict[str, Any]
) -> DetectionParity:
    """The artifact's detections (its outputs post-processed as ``modforge predict`` does) against
    the eager model's ``dt_bboxes`` on the same batch. Reported, not enforced: with outputs equal
    within the parity tolerance, only a candidate within that tolerance of the score threshold or
    of an NMS overlap limit can come out differently."""
    from .predict import postprocess

    sizes = torch.as_tensor(batch["image_sizes"]).reshape(-1, 2)
    with torch.no_grad():
        eager = model({"input": batch["input"], "image_sizes": sizes})["dt_bboxes"].float().cpu().numpy()
    found = postprocess(outputs.float().cpu().numpy(), sizes.cpu().numpy(), settings)
    if found.shape != eager.shape:
        return DetectionParity(len(eager), len(found), False, float("inf"), settings)
    box_diff = float(np.abs(found[:, 1:5] - eager[:, 1:5]).max()) if len(eager) else 0.0
    same = bool((found[:, [0, 6]] == eager[:, [0, 6]]).all()) and bool(
        np.abs(found[:, 5] - eager[:, 5]).max(initial=0.0) <= SCORE_TOLERANCE
    )
    return DetectionParity(len(eager), len(found), same and box_diff <= BOX_TOLERANCE, box_diff, settings)


def artifact_box_metrics(
    runners: dict[str, Any], loader: Any, settings: dict[str, Any], num_classes: int, class_names: Any = None
) -> dict[str, dict[str, Any]]:
    """COCO box metrics (pycocotools, :func:`~.coco_eval.coco_box_metrics`) of each exported graph
    in ``runners`` (name → a runnable taking ``{"input": array}``) on every batch of ``loader``,
    each graph's outputs post-processed as ``modforge predict`` does — the figures ``modforge
    test`` reports for the eager model, here for artifacts (an int8 graph beside its fp32 one)."""
    from .coco_eval import DetectionRecords, coco_box_metrics
    from .predict import postprocess

    records = {name: DetectionRecords() for name in runners}
    for batch in loader:
        x = batch["input"].numpy()
        sizes = torch.as_tensor(batch["image_sizes"]).reshape(-1, 2).numpy()
        for name, runner in runners.items():
            outputs = np.asarray(runner({"input": x})["logits"])
            found = postprocess(outputs, sizes, settings)
            records[name].add_batch({**batch, "dt_bboxes": torch.from_numpy(found)})
    metrics = {}
    for name, record in records.items():
        ground_truth, results = record.to_coco(num_classes)
        metrics[name] = coco_box_metrics(ground_truth, results, class_names)
    return metrics
