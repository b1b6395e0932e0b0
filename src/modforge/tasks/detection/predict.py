"""``modforge predict`` for an exported detector: picture → input, outputs → detections → JSON
and a drawn picture. numpy and Pillow only — no torch — so an ONNX detector predicts on a
machine with onnxruntime alone.

Where NMS runs, and why. An exported detector's graph (:mod:`modforge.engines.detection`)
ends at every location's decoded outputs — boxes, class probabilities, quality, level — and
the post-processing runs here, after the runtime, for every engine alike:

* ONNX cannot express it from the model's code: the threshold and NMS are a loop whose length
  depends on the values (tracing would freeze one image's path, and ONNX's own
  ``NonMaxSuppression`` is not the greedy, class-aware, tie-ordered NMS the model evaluates
  with);
* one implementation for every engine gives every artifact the same detections, from the
  settings its metadata records (``postprocess``), and keeps ``predict`` free of torch.

:func:`fcos_detections` is :func:`~modforge.components.heads.fcos.fcos_postprocess` (and
:func:`dense_detections` without the quality column is
:func:`~modforge.components.heads.retinanet.retinanet_postprocess`) operation for operation in
float32 (clip, ``probability > threshold``, rank by probability × quality, top-k per level, score
``sqrt(probability × quality)``, class-aware greedy NMS with the IoU as torchvision's NMS kernel
computes it, ``max_detections`` per image), so
on the same decoded outputs it gives the eager model's ``dt_bboxes``: the same boxes (bit for
bit), labels and order, and the same scores to one unit in float32's last place — torch's
vectorised float32 square root is not correctly rounded on every CPU (AVX-512), numpy's is
(tested, and for the eager, TorchScript and ONNX engines against a trained detector).
Candidates whose ranking values are exactly equal are ordered by location then class, where
``torch.topk`` leaves ties unspecified.

:func:`prepare_picture` makes a picture into what the ``coco`` dataset feeds the model in
evaluation (:class:`~modforge.data.detection.transforms.BoxTransforms` without its training
jitter, then :func:`~modforge.data.detection.batching.collate_detection` of one image):
RGB, resized keeping its aspect (``min_size``/``max_size``, bilinear), ``(pixels / 255 −
mean) / std``, zero-padded at the bottom and right to a multiple of ``size_divisor`` —
repeated here in numpy because those modules use torch (a test checks both give the same
array). Boxes come back in the original picture's pixels: divided by the resize scale, as
``modforge test`` writes ``detections.json``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...core.safe_files import atomic_open
from ...engines.base import EngineError
from ...engines.inputs import IMAGE_SUFFIXES, InputError, open_input_picture

__all__ = [
    "Picture",
    "detection_records",
    "draw_detections",
    "dense_detections",
    "fcos_detections",
    "postprocess",
    "prepare_picture",
]

LABELLED_FROM = 128
"""Pictures at least this many pixels on their shorter side get a text label on each box."""

PALETTE = [(230, 25, 75), (60, 180, 75), (0, 130, 200), (245, 130, 48), (145, 30, 180), (70, 240, 240),
           (240, 50, 230), (210, 245, 60), (250, 190, 212), (0, 128, 128)]  # fmt: skip


@dataclasses.dataclass
class Picture:
    """One picture made ready for a detector.

    Attributes:
        input: ``[1, 3, H, W]`` float32, normalised and zero-padded.
        image_size: ``(h, w)`` of the resized picture inside the padding (boxes are clipped to it).
        scale: resized / original size (original pixels = input pixels / scale).
        original: the picture as read (RGB, original size), for drawing.
    """

    input: np.ndarray
    image_size: tuple[int, int]
    scale: float
    original: Any


def prepare_picture(path: str | Path, normalisation: dict[str, Any]) -> Picture:
    """Read the picture at ``path`` and make it the detector's input, as the ``coco`` dataset
    did in evaluation (the module doc): one clear :class:`InputError` when it is not a picture
    this command reads, or when the artifact does not say how its pictures were prepared. The picture is
    opened through :func:`~modforge.engines.inputs.open_input_picture` (the shared picture guard:
    decompression bombs, formats, damaged files)."""
    from PIL import Image

    path = Path(path)
    if not path.is_file():
        raise InputError(f"input not found: {path}")
    if path.suffix.lower() not in IMAGE_SUFFIXES:
        raise InputError(f"{path}: unsupported input type '{path.suffix}'; a detector takes pictures "
                         f"({', '.join(IMAGE_SUFFIXES)})")  # fmt: skip
    mean, std = normalisation.get("mean"), normalisation.get("std")
    if not (isinstance(mean, Sequence) and isinstance(std, Sequence) and len(mean) == 3 and len(std) == 3):
        raise EngineError("the artifact's metadata does not record its pictures' normalisation (input.normalisation "
                          "mean and std, three values each); export it again with this version of modforge")  # fmt: skip
    min_size, max_size = normalisation.get("min_size"), normalisation.get("max_size")
    divisor = int(normalisation.get("size_divisor") or 1)
    with open_input_picture(path) as raw:
        width, height = raw.size  # from the header: nothing decoded yet
        raw.load()
        original = raw.convert("RGB")
    scale = _resize_scale(height, width, min_size, max_size)
    h, w = max(1, int(round(height * scale))), max(1, int(round(width * scale)))
    resized = original if (h, w) == (height, width) else original.resize((w, h), Image.BILINEAR)
    pixels = np.asarray(resized, dtype=np.float32)
    factor = np.float32(1.0 / 255.0) / np.asarray(std, dtype=np.float32)
    shift = np.asarray(mean, dtype=np.float32) / np.asarray(std, dtype=np.float32)
    values = (pixels * factor - shift).transpose(2, 0, 1)
    padded = np.zeros((1, 3, -(-h // divisor) * divisor, -(-w // divisor) * divisor), dtype=np.float32)
    padded[0, :, :h, :w] = values
    return Picture(padded, (h, w), scale, original)


def _resize_scale(height: int, width: int, min_size: int | None, max_size: int | None) -> float:
    """:func:`~modforge.data.detection.transforms.resize_scale` (shorter side ``min_size``,
    longer side at most ``max_size``)."""
    scale = 1.0 if min_size is None else min_size / min(height, width)
    if max_size is not None and max(height, width) * scale > max_size:
        scale = max_size / max(height, width)
    return scale


RULES = {"fcos": 6, "retinanet": 5}
"""The post-processing rules this version knows, with the columns each adds to the classes: ``fcos`` —
box, quality, level; ``retinanet`` — box, level."""


def postprocess(outputs: np.ndarray, image_sizes: np.ndarray, settings: dict[str, Any]) -> np.ndarray:
    """Detections ``[M, 7]`` (``image, x1, y1, x2, y2, score, label``, float32) from an exported
    detector's outputs, by the rule its metadata's ``postprocess`` names.

    Raises:
        EngineError: a rule this version does not know, or outputs of the wrong width.
    """
    kind = settings.get("type") if isinstance(settings, dict) else None
    if kind not in RULES:
        raise EngineError(f"the artifact's detections need post-processing of type {kind!r}, which this version of "
                          f"modforge does not know (it knows {', '.join(map(repr, RULES))})")  # fmt: skip
    expected = int(settings["num_classes"]) + RULES[kind]
    if outputs.ndim != 3 or outputs.shape[2] != expected:
        raise EngineError(f"the detector returned outputs of shape {list(outputs.shape)}; its metadata promises "
                          f"[batch, locations, {expected}]")  # fmt: skip
    return dense_detections(outputs, image_sizes, settings, quality=kind == "fcos")


def fcos_detections(outputs: np.ndarray, image_sizes: np.ndarray, settings: dict[str, Any]) -> np.ndarray:
    """:func:`~modforge.components.heads.fcos.fcos_postprocess` on
    :func:`~modforge.components.heads.fcos.fcos_outputs`' columns, in numpy (the module doc)."""
    return dense_detections(outputs, image_sizes, settings, quality=True)


def dense_detections(
    outputs: np.ndarray, image_sizes: np.ndarray, settings: dict[str, Any], quality: bool
) -> np.ndarray:
    """A dense head's post-processing on its exported columns, in numpy: with ``quality``,
    :func:`~modforge.components.heads.fcos.fcos_postprocess` (rank by probability × quality, score
    its square root); without, :func:`~modforge.components.heads.retinanet.retinanet_postprocess`
    (rank and score by the probability).

    Args:
        outputs: ``[B, P, C + 6]`` (fcos) or ``[B, P, C + 5]`` (retinanet) float32: unclipped box,
            C probabilities, [quality], level.
        image_sizes: ``[B, 2]`` ``(h, w)`` of each image inside its padding.
        settings: ``num_classes``, ``strides``, ``score_threshold``, ``pre_nms_topk``,
            ``nms_threshold``, ``max_detections``.
        quality: whether the outputs carry FCOS's quality column.

    Returns:
        ``[M, 7]`` float32 rows, images in order, each image's detections by decreasing score.
    """
    outputs = np.asarray(outputs, dtype=np.float32)
    classes, levels = int(settings["num_classes"]), len(settings["strides"])
    threshold, topk = np.float32(settings["score_threshold"]), int(settings["pre_nms_topk"])
    iou_threshold, most = np.float32(settings["nms_threshold"]), int(settings["max_detections"])
    level_column = classes + (5 if quality else 4)
    rows: list[np.ndarray] = []
    for i in range(outputs.shape[0]):
        h, w = (float(v) for v in np.asarray(image_sizes)[i])
        limit = np.asarray([w, h, w, h], dtype=np.float32)
        image = outputs[i]
        level_of = image[:, level_column]
        boxes, scores, labels = [], [], []
        for level in range(levels):
            mine = image[level_of == level]
            prob = mine[:, 4 : 4 + classes]
            ranked = prob * mine[:, 4 + classes][:, None] if quality else prob
            joint = np.where(prob > threshold, ranked, np.float32(-1.0)).reshape(-1)
            order = np.argsort(-joint, kind="stable")[: min(topk, joint.size)]
            order = order[joint[order] >= 0]
            boxes.append(np.minimum(np.maximum(mine[order // classes, :4], np.float32(0.0)), limit))
            scores.append(np.sqrt(joint[order]) if quality else joint[order])
            labels.append(order % classes)
        found_boxes, found_scores = np.concatenate(boxes), np.concatenate(scores)
        found_labels = np.concatenate(labels)
        keep = _greedy_nms(found_boxes, found_scores, found_labels, iou_threshold, most)
        count = len(keep)
        rows.append(np.concatenate([np.full((count, 1), i, dtype=np.float32), found_boxes[keep],
                                    found_scores[keep, None], found_labels[keep, None].astype(np.float32)], axis=1))  # fmt: skip
    return np.concatenate(rows) if rows else np.zeros((0, 7), dtype=np.float32)


def _greedy_nms(boxes: np.ndarray, scores: np.ndarray, labels: np.ndarray, threshold: np.float32,
                most: int) -> np.ndarray:  # fmt: skip
    """Indices kept by class-aware greedy NMS, by decreasing score (stable: ties keep their
    order), at most ``most`` — :func:`~modforge.components.boxes.batched_nms`'s result: the IoU
    computed in float32 as torchvision's kernel computes it (no floor under the union: two empty
    boxes give NaN, which suppresses nothing) and compared with the float32 threshold."""
    order = np.argsort(-scores, kind="stable")
    ranked, groups = boxes[order], labels[order]
    areas = np.maximum(ranked[:, 2] - ranked[:, 0], 0) * np.maximum(ranked[:, 3] - ranked[:, 1], 0)
    suppressed = np.zeros(len(order), dtype=bool)
    keep: list[int] = []
    for i in range(len(order)):
        if suppressed[i]:
            continue
        keep.append(i)
        if len(keep) == most:
            break
        rest = ranked[i + 1 :]
        wh_x = np.maximum(np.minimum(ranked[i, 2], rest[:, 2]) - np.maximum(ranked[i, 0], rest[:, 0]), 0)
        wh_y = np.maximum(np.minimum(ranked[i, 3], rest[:, 3]) - np.maximum(ranked[i, 1], rest[:, 1]), 0)
        inter = wh_x * wh_y
        with np.errstate(invalid="ignore", divide="ignore"):  # two empty boxes: 0 / 0, never suppressed
            iou = inter / (areas[i] + areas[i + 1 :] - inter)
        suppressed[i + 1 :] |= (iou > threshold) & (groups[i + 1 :] == groups[i])
    return order[np.asarray(keep, dtype=np.int64)]


def detection_records(rows: np.ndarray, scale: float, class_names: Sequence[str]) -> list[dict[str, Any]]:
    """One image's ``[M, 7]`` detection rows as ``{"class", "score", "box"}`` records, the box in
    the original picture's pixels (input pixels / ``scale``)."""
    records = []
    for row in np.asarray(rows):
        label = int(row[6])
        name = class_names[label] if 0 <= label < len(class_names) else str(label)
        box = (np.asarray(row[1:5], dtype=np.float64) / float(scale)).tolist()
        records.append({"class": name, "score": float(row[5]), "box": box})
    return records


def draw_detections(picture: Any, records: Sequence[dict[str, Any]], path: str | Path,
                    class_names: Sequence[str]) -> Path:  # fmt: skip
    """Write ``picture`` (RGB, original size) with each record's box drawn, one colour per class,
    as a PNG at ``path``; each box is labelled ``class score`` when the picture is at least
    :data:`LABELLED_FROM` pixels on its shorter side (on smaller ones the text would hide the
    objects; the JSON line has every class and score)."""
    from PIL import ImageDraw

    canvas = picture.copy()
    draw = ImageDraw.Draw(canvas)
    width = max(1, round(min(canvas.size) / 160))
    labelled = min(canvas.size) >= LABELLED_FROM
    for record in sorted(records, key=lambda r: r["score"]):  # the best drawn last, on top
        name = record["class"]
        colour = PALETTE[list(class_names).index(name) % len(PALETTE)] if name in class_names else PALETTE[0]
        x1, y1, x2, y2 = record["box"]
        draw.rectangle([x1, y1, max(x1, x2 - 1), max(y1, y2 - 1)], outline=colour, width=width)
        if not labelled:
            continue
        text = f"{name} {record['score']:.2f}"
        left, top, right, bottom = draw.textbbox((x1, y1), text)
        lift = bottom - top + 2
        y = y1 - lift if y1 - lift >= 0 else y1
        draw.rectangle([x1, y, x1 + right - left + 2, y + lift], fill=colour)
        draw.text((x1 + 1, y), text, fill=(255, 255, 255))
    path = Path(path)
    with atomic_open(path, "wb") as handle:
        canvas.save(handle, format="PNG")
    return path
