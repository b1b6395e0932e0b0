"""The last step of dense detection inference, shared by ``fcos`` and ``retinanet``: the candidates
of every level become each image's detections by class-aware NMS.

Each head ranks its candidates in its own way (FCOS by probability × quality, RetinaNet by the
class probability), marks with −1 the (location, class) pairs whose probability did not pass the
score threshold (:func:`thresholded`) and hands every level's boxes and ranking to
:func:`ranked_detections`: it keeps the best ``pre_nms_topk`` of each level and image
(:func:`level_candidates`) and :func:`detections_per_image` runs
:func:`~modforge.components.boxes.batched_nms` image by image and writes United Perception's
``dt_bboxes`` rows. TorchScript compiles it all (once torchvision is imported: the NMS kernel).
"""

from __future__ import annotations

import torch

from ..boxes import batched_nms

__all__ = ["detections_per_image", "level_candidates", "ranked_detections", "thresholded"]


def thresholded(prob: torch.Tensor, score_threshold: float, ranking: torch.Tensor) -> torch.Tensor:
    """``ranking`` where the class probability ``prob`` exceeds ``score_threshold``, −1 elsewhere."""
    return torch.where(prob > score_threshold, ranking, torch.full_like(prob, -1.0))


def ranked_detections(
    level_boxes: list[torch.Tensor],
    level_ranking: list[torch.Tensor],
    pre_nms_topk: int,
    nms_threshold: float,
    max_detections: int,
    sqrt_scores: bool,
) -> torch.Tensor:
    """``dt_bboxes`` ``[M, 7]`` from every level's boxes and ranking: per level and image the best
    ``pre_nms_topk`` candidates, then :func:`detections_per_image`.

    Args:
        level_boxes: per level, ``[B, P, 4]`` every location's (or anchor's) box, clipped to its image.
        level_ranking: per level, ``[B, P, C]`` what candidates are ranked by (:func:`thresholded`).
        pre_nms_topk: candidates kept per level and image.
        nms_threshold: IoU above which class-aware NMS drops the lower-scored box.
        max_detections: detections kept per image.
        sqrt_scores: a detection's score is the square root of its ranking value (FCOS's
            ``sqrt(probability × quality)``), else the value itself.
    """
    all_boxes: list[torch.Tensor] = []
    all_scores: list[torch.Tensor] = []
    all_labels: list[torch.Tensor] = []
    all_images: list[torch.Tensor] = []
    for n in range(len(level_boxes)):
        found, value, labels, images = level_candidates(level_boxes[n], level_ranking[n], pre_nms_topk)
        all_boxes.append(found)
        all_scores.append(value.sqrt() if sqrt_scores else value)
        all_labels.append(labels)
        all_images.append(images)
    batch = level_boxes[0].shape[0]
    return detections_per_image(all_boxes, all_scores, all_labels, all_images, batch, nms_threshold, max_detections)


def level_candidates(
    boxes: torch.Tensor, ranking: torch.Tensor, topk: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The best ``topk`` (location, class) candidates of each image of one level, flat.

    Args:
        boxes: ``[B, P, 4]`` every location's (or anchor's) box, clipped to its image.
        ranking: ``[B, P, C]`` the value each (location, class) is ranked by, −1 where the class
            probability did not pass the score threshold (the caller sets it).
        topk: candidates kept per image (at most ``P × C``).

    Returns:
        ``(boxes [N, 4], values [N], labels [N], images [N])`` of the candidates that passed,
        each image's by decreasing value.
    """
    batch, classes = ranking.shape[0], ranking.shape[2]
    k = min(topk, ranking.shape[1] * classes)
    top, index = ranking.flatten(1).topk(k, dim=1)  # [B, k]
    location = torch.div(index, classes, rounding_mode="floor")
    images = torch.arange(batch, device=boxes.device).unsqueeze(1).expand(-1, k)
    valid = top >= 0
    chosen = boxes.gather(1, location.unsqueeze(2).expand(-1, -1, 4))
    return chosen[valid], top[valid], torch.remainder(index, classes)[valid], images[valid]


def detections_per_image(
    level_boxes: list[torch.Tensor],
    level_scores: list[torch.Tensor],
    level_labels: list[torch.Tensor],
    level_images: list[torch.Tensor],
    batch: int,
    nms_threshold: float,
    max_detections: int,
) -> torch.Tensor:
    """``dt_bboxes`` ``[M, 7]`` (``batch_index, x1, y1, x2, y2, score, label``) from every
    level's candidates: class-aware NMS within each image, at most ``max_detections`` per image
    by decreasing score, images in order.

    Args:
        level_boxes: per level, ``[N, 4]`` candidates' boxes (clipped to their image).
        level_scores: per level, ``[N]`` their final scores (what NMS and the output rank by).
        level_labels: per level, ``[N]`` long classes.
        level_images: per level, ``[N]`` long image index of each candidate.
        batch: number of images.
        nms_threshold: IoU above which the lower-scored box of a class is dropped.
        max_detections: detections kept per image.
    """
    boxes, scores = torch.cat(level_boxes), torch.cat(level_scores)
    labels, images = torch.cat(level_labels), torch.cat(level_images)
    rows: list[torch.Tensor] = []
    for i in range(batch):
        mine = torch.nonzero(images == i).reshape(-1)
        keep = mine[batched_nms(boxes[mine], scores[mine], labels[mine], nms_threshold)[:max_detections]]
        rows.append(
            torch.cat(
                [
                    images[keep].unsqueeze(1).to(boxes.dtype),
                    boxes[keep],
                    scores[keep].unsqueeze(1),
                    labels[keep].unsqueeze(1).to(boxes.dtype),
                ],
                dim=1,
            )
        )
    if len(rows) == 0:
        return boxes.new_zeros(0, 7)
    return torch.cat(rows)
