"""Box operations in plain torch: area, IoU, GIoU, FCOS distance encode/decode, (batched) NMS.

Boxes are ``x1, y1, x2, y2`` in pixels, in the last dimension. Every function is vectorised
(no Python loop over boxes), works on any device and dtype, and is compilable by
``torch.jit.script`` (the tests script :func:`nms`, :func:`batched_nms` and the decoders and
compare them with eager).

Conventions (what the brute-force tests in ``tests/test_box_ops.py`` check):

* **Degenerate boxes.** A box with ``x2 <= x1`` or ``y2 <= y1`` has area 0 (widths and
  heights are clamped at 0). IoU and GIoU divide by ``max(denominator, eps)`` (mmdetection's
  ``bbox_overlaps`` convention, ``eps = 1e-6``), so a pair of empty boxes gives IoU 0 and
  GIoU 0 — never NaN — and gradients stay finite.
* **Empty sets.** ``[0, 4]`` inputs give ``[0, M]``/``[N, 0]`` matrices and empty index sets.
* **NMS** is greedy NMS exactly as ``torchvision.ops.nms``: boxes in decreasing score order
  (ties: the earlier index first), a box is dropped when its IoU with an already *kept* box
  of the same group is strictly greater than the threshold; the kept indices are returned
  in decreasing score order. :func:`batched_nms` is class-aware (boxes of different
  ``idxs`` never suppress each other) by masking the IoU matrix, not by torchvision's
  coordinate-offset trick, which loses float32 precision when there are many groups.
"""

from __future__ import annotations

from typing import Optional

import torch

__all__ = [
    "batched_nms",
    "box_area",
    "box_iou",
    "decode_ltrb",
    "encode_ltrb",
    "generalized_box_iou",
    "nms",
]

EPS = 1e-6
"""Smallest denominator of an IoU/GIoU ratio (mmdetection's ``bbox_overlaps`` default)."""


def box_area(boxes: torch.Tensor) -> torch.Tensor:
    """Area of each box ``[..., 4]`` → ``[...]``; inverted or flat boxes have area 0."""
    wh = (boxes[..., 2:] - boxes[..., :2]).clamp(min=0)
    return wh[..., 0] * wh[..., 1]


def _pair(boxes1: torch.Tensor, boxes2: torch.Tensor, aligned: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The two operands shaped to broadcast: ``[N, 1, 4]``/``[1, M, 4]`` (pairwise) or as given."""
    if aligned:
        if boxes1.shape != boxes2.shape:
            raise ValueError(
                "aligned IoU needs boxes of one shape, got "
                + str(list(boxes1.shape))
                + " and "
                + str(list(boxes2.shape))
            )
        return boxes1, boxes2
    return boxes1.unsqueeze(-2), boxes2.unsqueeze(-3)


def _inter_union(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    lt = torch.maximum(a[..., :2], b[..., :2])
    rb = torch.minimum(a[..., 2:], b[..., 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    return inter, box_area(a) + box_area(b) - inter


def box_iou(boxes1: torch.Tensor, boxes2: torch.Tensor, aligned: bool = False, eps: float = EPS) -> torch.Tensor:
    """Intersection over union.

    Args:
        boxes1: ``[N, 4]`` (or ``[..., N, 4]``).
        boxes2: ``[M, 4]``; with ``aligned`` the same shape as ``boxes1``.
        aligned: IoU of ``boxes1[i]`` with ``boxes2[i]`` (``[N]``) instead of every pair
            (``[N, M]``) — mmdetection's ``is_aligned``.
        eps: smallest denominator (see the module's conventions).
    """
    a, b = _pair(boxes1, boxes2, aligned)
    inter, union = _inter_union(a, b)
    return inter / union.clamp(min=eps)


def generalized_box_iou(
    boxes1: torch.Tensor, boxes2: torch.Tensor, aligned: bool = False, eps: float = EPS
) -> torch.Tensor:
    """Generalized IoU (Rezatofighi et al., CVPR 2019): ``IoU − (C − U) / C`` with ``C`` the
    area of the smallest box enclosing both and ``U`` their union; in ``[-1, 1]``. Shapes and
    arguments as :func:`box_iou`."""
    a, b = _pair(boxes1, boxes2, aligned)
    inter, union = _inter_union(a, b)
    iou = inter / union.clamp(min=eps)
    lt = torch.minimum(a[..., :2], b[..., :2])
    rb = torch.maximum(a[..., 2:], b[..., 2:])
    wh = (rb - lt).clamp(min=0)
    enclosing = wh[..., 0] * wh[..., 1]
    return iou - (enclosing - union) / enclosing.clamp(min=eps)


def encode_ltrb(points: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    """FCOS regression targets: the distances ``(left, top, right, bottom)`` from each point
    ``[..., 2]`` (x, y) to the sides of its box ``[..., 4]`` (mmdetection's ``bbox2distance``
    without normalisation or clamping: a point outside its box gets negative distances)."""
    return torch.cat([points - boxes[..., :2], boxes[..., 2:] - points], dim=-1)


def decode_ltrb(
    points: torch.Tensor, distances: torch.Tensor, max_shape: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """The inverse of :func:`encode_ltrb`: boxes ``[..., 4]`` from points ``[..., 2]`` and
    distances ``[..., 4]`` (mmdetection's ``distance2bbox``).

    Args:
        points: ``(x, y)`` of each location.
        distances: ``(left, top, right, bottom)``.
        max_shape: ``(height, width)`` to clip to (``x`` into ``[0, width]``, ``y`` into
            ``[0, height]``), broadcastable to ``[..., 2]`` — one size, or one per box.
    """
    boxes = torch.cat([points - distances[..., :2], points + distances[..., 2:]], dim=-1)
    if max_shape is not None:
        wh = max_shape.flip(-1).to(boxes.dtype)  # (h, w) → (w, h)
        limit = torch.cat([wh, wh], dim=-1)
        boxes = torch.minimum(boxes.clamp(min=0), limit)
    return boxes


def batched_nms(
    boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor, iou_threshold: float, chunk: int = 2048
) -> torch.Tensor:
    """Greedy NMS within each group (class-aware NMS when ``idxs`` are labels).

    Vectorised: the "suppresses" relation ``S[i, j]`` (``i`` ranks above ``j``, same group,
    IoU > threshold) is built once, row chunks at a time (``chunk`` rows, bounding memory to
    ``chunk × N``), then ``keep[j] = not any_i(keep[i] and S[i, j])`` is iterated from
    all-kept to its fixed point. The fixed point is unique and is exactly greedy NMS (by
    induction on rank: after ``t`` rounds the ``t`` best-ranked boxes are settled), so the
    loop ends after at most ``N`` rounds — in practice after the length of the longest
    chain of suppressions, a handful.

    Args:
        boxes: ``[N, 4]``.
        scores: ``[N]``.
        idxs: ``[N]`` integer group of each box (class, or ``image * num_classes + class``).
        iou_threshold: a box is dropped when its IoU with a kept, better box of its group is
            strictly greater than this.
        chunk: rows of the IoU matrix computed at once.

    Returns:
        ``[K]`` long indices into ``boxes`` of the kept boxes, by decreasing score.
    """
    n = boxes.shape[0]
    if n == 0:
        return torch.zeros(0, dtype=torch.long, device=boxes.device)
    order = torch.sort(scores, descending=True, stable=True)[1]
    ranked, groups = boxes[order], idxs[order]
    rank = torch.arange(n, device=boxes.device)
    suppresses = torch.zeros(n, n, dtype=torch.bool, device=boxes.device)
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        overlap = box_iou(ranked[start:stop], ranked) > iou_threshold
        same = groups[start:stop].unsqueeze(1) == groups.unsqueeze(0)
        later = rank[start:stop].unsqueeze(1) < rank.unsqueeze(0)
        suppresses[start:stop] = overlap & same & later
    keep = torch.ones(n, dtype=torch.bool, device=boxes.device)
    for _ in range(n):
        new_keep = ~(suppresses & keep.unsqueeze(1)).any(dim=0)
        if bool(torch.equal(new_keep, keep)):
            break
        keep = new_keep
    return order[keep]


def nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Greedy NMS over all boxes (one group); see :func:`batched_nms`. Returns the kept
    indices by decreasing score, as ``torchvision.ops.nms``."""
    return batched_nms(boxes, scores, torch.zeros_like(scores, dtype=torch.long), iou_threshold)
