"""``coco_map`` — COCO box AP of a validation or test pass, by pycocotools.

One metric gives the whole COCO summary, because pycocotools computes it in one evaluation:
its value is a mapping, so a run logs ``val_map``, ``val_map_50``, ``val_map_75``,
``val_map_small`` … as separate columns (monitor ``val_map``) and keeps the per-class AP in
``summary.json``. With several processes every process's images are gathered first, so the
figures are those of the whole split, never an average of shards.
"""

from __future__ import annotations

from typing import Any

from ...core.registries import register_metric
from ...train.distributed import all_gather_objects
from ...train.metrics import Metric
from .coco_eval import DetectionRecords, coco_box_metrics

__all__ = ["CocoMAP"]


@register_metric("coco_map")
class CocoMAP(Metric):
    """COCO detection metrics (pycocotools' ``COCOeval``, ``bbox``): ``map`` (AP at IoU
    0.50:0.95), ``map_50``, ``map_75``, ``map_small``, ``map_medium``, ``map_large``,
    ``mar_100``, and per-class AP (``per_class``, in the summary only). Reads each batch's
    ``dt_bboxes``, ``targets``, ``image_id``, ``scale`` and ``orig_sizes``.

    Args:
        num_classes: number of classes (wired by the builder).
        class_names: names for the per-class table (wired from the dataset when known).
    """

    logs = ("map", "map_50", "map_75", "map_small", "map_medium", "map_large", "mar_100")

    def __init__(self, num_classes: int, class_names: list[str] | None = None):
        self.num_classes = num_classes
        self.class_names = class_names
        self.reset()

    def reset(self) -> None:
        self.records = DetectionRecords()

    def update(self, out: dict[str, Any]) -> None:
        self.records.add_batch(out)

    def sync(self, what: str = "a metric") -> None:
        gathered = all_gather_objects(self.records, what)
        self.records = DetectionRecords()
        self.records.merge(gathered)

    def compute(self) -> dict[str, Any]:
        ground_truth, results = self.records.to_coco(self.num_classes)
        figures = coco_box_metrics(ground_truth, results, self.class_names, curves=True)
        self.curves = figures.pop("pr_curves")  # for the test report's plot; not a logged figure
        return figures
