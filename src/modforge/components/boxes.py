"""Box operations: area, IoU, GIoU, FCOS distance and anchor delta encode/decode in plain torch;
(class-aware) greedy NMS on ``torchvision.ops.nms``'s kernel.

Boxes are ``x1, y1, x2, y2`` in pixels, in the last dimension. Every function is vectorised
(no Python loop over boxes), works on any device and floating dtype (NMS computes in float32
unless the boxes are float64), and is compilable by
``torch.jit.script`` (the tests script :func:`nms`, :func:`batched_nms` and the decoders and
compare them with eager).

Conventions (what the brute-force tests in ``tests/test_box_ops.py`` check):

* **Degenerate boxes.** A box with ``x2 <= x1`` or ``y2 <= y1`` has area 0 (widths and
  heights are clamped at 0). IoU and GIoU divide by ``max(denominator, eps)`` (mmdetection's
  ``bbox_overlaps`` convention, ``eps = 1e-6``), so a pair of empty boxes gives IoU 0 and
  GIoU 0 — never NaN — and gradients stay finite.
* **Empty sets.** ``[0, 4]`` inputs give ``[0, M]``/``[N, 0]`` matrices and empty index sets.
* **NMS** is greedy NMS as ``torchvision.ops.nms`` computes it (its kernel runs it): boxes in
  decreasing score order (ties: the earlier index first — made certain here, the kernel's own
  sort is not stable), a box is dropped when its IoU with an already *kept* box of the same
  group is strictly greater than the threshold; the kept indices are returned in decreasing
  score order. :func:`batched_nms` is class-aware (boxes of different ``idxs`` never
  suppress each other) by running the kernel per group, not by torchvision's
  coordinate-offset trick, which rounds the shifted float32 coordinates differently.
  torchvision is imported on the first call (the ``vision`` extra); ``torch.jit.script``
  compiles both functions once it has been imported.

Why the rest stays in plain torch: torchvision has no aligned (pairwise-by-index) IoU/GIoU,
no FCOS distance coder, and its ``box_iou`` divides by a union that can be 0 (NaN for two
empty boxes), where these return 0; its anchor ``BoxCoder`` lives in a private module.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

__all__ = [
    "batched_nms",
    "box_area",
    "box_iou",
    "clip_to_image",
    "decode_deltas",
    "decode_ltrb",
    "encode_deltas",
    "encode_ltrb",
    "generalized_box_iou",
    "load_torchvision_ops",
    "nms",
]

DELTA_CLIP = math.log(1000.0 / 16)
"""Largest log-scale a decoded width or height may take (Detectron's and torchvision's
``bbox_xform_clip``): a box at most 62.5× its anchor, so ``exp`` cannot overflow."""

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
        boxes = clip_to_image(boxes, max_shape)
    return boxes


def encode_deltas(anchors: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    """RetinaNet's (Faster R-CNN's) regression targets of boxes ``[..., 4]`` from their anchors
    ``[..., 4]``: ``(dx, dy, dw, dh) = ((x − xₐ)/wₐ, (y − yₐ)/hₐ, log(w/wₐ), log(h/hₐ))`` of the
    centres and sizes — weights (1, 1, 1, 1), as torchvision's and mmdetection's RetinaNet."""
    anchor_wh = anchors[..., 2:] - anchors[..., :2]
    anchor_centre = anchors[..., :2] + 0.5 * anchor_wh
    wh = boxes[..., 2:] - boxes[..., :2]
    centre = boxes[..., :2] + 0.5 * wh
    return torch.cat([(centre - anchor_centre) / anchor_wh, torch.log(wh / anchor_wh)], dim=-1)


def decode_deltas(anchors: torch.Tensor, deltas: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`encode_deltas`: boxes ``[..., 4]`` from anchors and deltas, the
    log-sizes clipped at :data:`DELTA_CLIP` (no clipping to the image: see :func:`decode_ltrb`)."""
    anchor_wh = anchors[..., 2:] - anchors[..., :2]
    anchor_centre = anchors[..., :2] + 0.5 * anchor_wh
    centre = deltas[..., :2] * anchor_wh + anchor_centre
    half = 0.5 * torch.exp(deltas[..., 2:].clamp(max=DELTA_CLIP)) * anchor_wh
    return torch.cat([centre - half, centre + half], dim=-1)


def clip_to_image(boxes: torch.Tensor, max_shape: torch.Tensor) -> torch.Tensor:
    """Boxes ``[..., 4]`` clipped to ``[0, width] × [0, height]``, ``max_shape`` ``(h, w)``
    broadcastable to ``[..., 2]`` (one size, or one per box)."""
    wh = max_shape.flip(-1).to(boxes.dtype)  # (h, w) → (w, h)
    return torch.minimum(boxes.clamp(min=0), torch.cat([wh, wh], dim=-1))


def batched_nms(boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Greedy NMS within each group (class-aware NMS when ``idxs`` are labels), by
    ``torchvision.ops.nms``'s kernel, one group at a time.

    Why not ``torchvision.ops.batched_nms``: it separates the groups by shifting each group's
    boxes by ``group × (largest coordinate + 1)``, and the shifted float32 coordinates round
    differently, so an IoU near the threshold can fall on the other side of it. Why ranks
    instead of the scores: the kernel sorts the scores with an unstable sort, so equal scores
    would keep an unspecified order; the boxes are ranked here by a stable sort (ties: the
    earlier index first) and the kernel is given the ranks, which are all different. The
    result is the greedy NMS of the module doc exactly (tested against a brute-force loop, and
    against ``modforge predict``'s numpy NMS on a trained detector's outputs).

    Args:
        boxes: ``[N, 4]``.
        scores: ``[N]``.
        idxs: ``[N]`` integer group of each box (class, or ``image * num_classes + class``).
        iou_threshold: a box is dropped when its IoU with a kept, better box of its group is
            strictly greater than this.

    Returns:
        ``[K]`` long indices into ``boxes`` of the kept boxes, by decreasing score.
    """
    n = boxes.shape[0]
    if n == 0:
        return torch.zeros(0, dtype=torch.long, device=boxes.device)
    if not torch.jit.is_scripting():
        load_torchvision_ops()
    order = torch.sort(scores, descending=True, stable=True)[1]
    # the kernel takes float32 or float64 boxes (half precision: computed in float32)
    ranked = boxes[order] if boxes.dtype == torch.float64 else boxes[order].float()
    groups = idxs[order]
    # n, n − 1, …, 1: distinct and exact in float32 up to 2^24 boxes
    ranks = torch.arange(n, 0, -1, dtype=ranked.dtype, device=boxes.device)
    # the kernel compares its IoU with the threshold in double precision; rounded to the boxes' precision
    # first, the comparison is the one a float32 computation makes (as modforge predict's numpy NMS does)
    threshold = float(torch.tensor(iou_threshold, dtype=ranked.dtype).item())
    keep = torch.zeros(n, dtype=torch.bool, device=boxes.device)
    distinct: list[int] = torch.unique(groups).tolist()
    for group in distinct:
        members = torch.nonzero(groups == group).reshape(-1)
        kept = torch.ops.torchvision.nms(ranked[members], ranks[members], threshold)
        keep[members[kept]] = True
    return order[keep]


def nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Greedy NMS over all boxes (one group); see :func:`batched_nms`. Returns the kept
    indices by decreasing score, as ``torchvision.ops.nms``."""
    return batched_nms(boxes, scores, torch.zeros_like(scores, dtype=torch.long), iou_threshold)


@torch.jit.unused
def load_torchvision_ops() -> None:
    """Register torchvision's operators (``torch.ops.torchvision.nms``): importing torchvision does
    it, once; a clear error names the extra when it is not installed. A detection head calls it when
    it is built, so a missing torchvision stops a run before training, not at its first validation."""
    try:
        import torchvision  # noqa: F401 - registers torch.ops.torchvision
    except ImportError:
        raise ImportError("the detection heads run torchvision's box operations (NMS, IoU, losses): pip install "
                          "'modforge[vision]' (or pip install torchvision)") from None  # fmt: skip
