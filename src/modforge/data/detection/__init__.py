"""Box data for object detection: COCO files (:mod:`.coco`, the registered ``coco`` dataset), transforms that
move boxes with the pixels (:mod:`.transforms`), padded batches with per-image targets (:mod:`.batching`) and
a synthetic set of shapes written as COCO files (:mod:`.shapes`, ``modforge data make-shapes``).

The names below are imported on first use, so importing the package costs nothing until one is needed.
"""

from __future__ import annotations

from ..lazy import lazy_attributes

__all__ = [
    "AnnotationError",
    "BoxTransforms",
    "CocoDetection",
    "SkipReport",
    "collate_detection",
    "make_shapes",
    "read_instances",
]

_WHERE = {
    "AnnotationError": ".coco",
    "CocoDetection": ".coco",
    "SkipReport": ".coco",
    "read_instances": ".coco",
    "BoxTransforms": ".transforms",
    "collate_detection": ".batching",
    "make_shapes": ".shapes",
}

__getattr__ = lazy_attributes(__name__, _WHERE)
